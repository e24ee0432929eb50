#include "split_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace lesson03 {

std::vector<double> merge_states(const std::vector<PartitionState>& parts) {
    double M = -std::numeric_limits<double>::infinity();
    for (const auto& p : parts) M = std::max(M, p.m);
    const size_t D = parts.empty() ? 0 : parts.front().acc.size();
    std::vector<double> num(D, 0.0);
    double den = 0;
    for (const auto& p : parts) {
        const double w = std::exp(p.m - M);  // 0 for a sentinel, whose m is -inf
        for (size_t d = 0; d < D; ++d) num[d] += w * p.acc[d];
        den += w * p.l;
    }
    for (auto& x : num) x /= den;
    return num;
}

PartitionState partition_state(const std::vector<double>& logits, const std::vector<std::vector<double>>& v, int begin,
                               int end) {
    PartitionState s;
    const size_t D = v.empty() ? 0 : v.front().size();
    s.acc.assign(D, 0.0);
    s.m = -std::numeric_limits<double>::infinity();
    for (int t = begin; t < end; ++t) s.m = std::max(s.m, logits[t]);
    for (int t = begin; t < end; ++t) {
        const double e = std::exp(logits[t] - s.m);
        s.l += e;
        for (size_t d = 0; d < D; ++d) s.acc[d] += e * v[t][d];
    }
    return s;  // begin >= end: the sentinel (-inf, 0, 0)
}

int num_partitions(int ctx, int partition_size) { return (ctx + partition_size - 1) / partition_size; }

int partition_tokens(const SplitPlan& p, int ctx) {
    if (p.splits == 0) return p.partition_size;
    const int even = (ctx + p.splits - 1) / p.splits;
    return (even + 31) / 32 * 32;
}

// With `splits`, a sequence shorter than the longest can need more pieces of its own
// (rounded-up) size than the longest does, so the grid always has `splits` partitions; the
// ones past a sequence's end are sentinels.
int grid_partitions(const SplitPlan& p, int max_ctx) {
    return p.splits > 0 ? p.splits : num_partitions(max_ctx, p.partition_size);
}

std::vector<Cell> longest_first_order(const SplitPlan& p, const std::vector<int>& ctx, int partitions) {
    struct Sized {
        Cell cell;
        int tokens;  // the cell's token count (0: a sentinel)
    };
    std::vector<Sized> cells;
    cells.reserve(ctx.size() * static_cast<size_t>(partitions));
    for (int part = 0; part < partitions; ++part)  // the grid's own order: partition-major
        for (int seq = 0; seq < static_cast<int>(ctx.size()); ++seq) {
            const int size = partition_tokens(p, ctx[seq]);
            cells.push_back({{seq, part}, std::max(0, std::min(size, ctx[seq] - part * size))});
        }
    std::stable_sort(cells.begin(), cells.end(), [](const Sized& a, const Sized& b) { return a.tokens > b.tokens; });
    std::vector<Cell> out;
    out.reserve(cells.size());
    for (const Sized& c : cells) out.push_back(c.cell);
    return out;
}

std::string plan_name(const SplitPlan& p) {
    if (p.tgs > 0)
        return std::string(p.fused ? "fused_merge_tgs" : "partitions_tgs") + std::to_string(p.tgs) + "_" +
               std::to_string(p.partition_size);
    const std::string kind =
        std::string(p.head_rows ? "rows_" : "") + (p.units ? "units_" : "") + (p.longest_first ? "lpt_" : "") +
        (p.flat_merge ? "flat_" : "") + (p.cluster ? "cluster_" : "");
    if (p.splits > 0) return "split_k_" + kind + (p.fused ? "fused_" : "") + "even" + std::to_string(p.splits);
    return "split_k_" + kind + (p.fused ? "fused_" : "") + std::to_string(p.partition_size);
}

namespace {

// A positive int written in decimal without leading zeros (so that one plan has one name).
bool parse_count(const std::string& text, int* out) {
    if (text.empty() || text.size() > 9 || text[0] == '0') return false;
    for (char ch : text)
        if (ch < '0' || ch > '9') return false;
    *out = std::stoi(text);
    return true;
}

// Removes `prefix` from the front of `text` if it is there.
bool eat(std::string& text, const std::string& prefix) {
    if (text.compare(0, prefix.size(), prefix) != 0) return false;
    text.erase(0, prefix.size());
    return true;
}

}  // namespace

bool parse_plan_name(const std::string& name, SplitPlan* out) {
    SplitPlan p;
    std::string rest = name;
    if (eat(rest, "partitions_tgs") || (p.fused = eat(rest, "fused_merge_tgs"))) {  // the steps: <tgs>_<P>
        const size_t sep = rest.find('_');
        if (sep == std::string::npos || !parse_count(rest.substr(0, sep), &p.tgs) ||
            !parse_count(rest.substr(sep + 1), &p.partition_size))
            return false;
    } else {  // split_k_[rows_][units_][lpt_][flat_][cluster_][fused_](<P> | even<S>), in plan_name's order
        if (!eat(rest, "split_k_")) return false;
        p.head_rows = eat(rest, "rows_");
        p.units = eat(rest, "units_");
        p.longest_first = eat(rest, "lpt_");
        p.flat_merge = eat(rest, "flat_");
        p.cluster = eat(rest, "cluster_");
        p.fused = eat(rest, "fused_");
        if (eat(rest, "even")) {
            p.partition_size = 0;
            if (!parse_count(rest, &p.splits)) return false;
        } else if (!parse_count(rest, &p.partition_size)) {
            return false;
        }
    }
    if (plan_name(p) != name) return false;  // e.g. a name that plan_name would write otherwise
    *out = p;
    return true;
}

namespace {

constexpr int kPostPartition = 512;  // the posts' and vLLM's PARTITION_SIZE
constexpr long long kLongPartition = 4096;  // our rule: one CTA per SM suffices from here
constexpr long long kMixedLargest = 4096;   // our rule: the largest partition of a batch of mixed lengths

Choice split_at(int partition_size, bool split) {
    Choice c;
    c.split = split;
    c.plan.partition_size = partition_size;
    return c;
}

}  // namespace

Choice post_rule_1(const ShapeFacts& f) {
    const long long ctas = static_cast<long long>(f.B) * f.Hkv;
    return split_at(kPostPartition, ctas < 0.75 * f.sms && num_partitions(f.max_ctx, kPostPartition) >= 2);
}

Choice post_rule_2(const ShapeFacts& f) {
    const long long ctas = static_cast<long long>(f.B) * f.Hkv;
    return split_at(kPostPartition, ctas < 0.5 * f.sms && num_partitions(f.max_ctx, kPostPartition) >= 4);
}

Choice vllm_rule(const ShapeFacts& f) {
    const bool use_v1 =
        f.max_ctx <= 8192 && (num_partitions(f.max_ctx, kPostPartition) == 1 || static_cast<long long>(f.B) * f.H > 512);
    return split_at(kPostPartition, !use_v1);
}

Choice split_count_rule(const ShapeFacts& f) {
    const long long ctas = static_cast<long long>(f.B) * f.Hkv;
    const long long fill = (f.sms + ctas - 1) / ctas;
    const int splits = static_cast<int>(std::min<long long>(fill, f.max_ctx / 64));
    Choice c;
    c.split = splits > 1;
    c.plan.splits = std::max(splits, 1);
    c.plan.partition_size = 0;
    return c;
}

SplitPlan our_plan(const ShapeFacts& f) {
    const long long ctas = static_cast<long long>(f.B) * f.Hkv;
    const int group = f.H / f.Hkv;
    const bool even_batch = f.max_ctx * static_cast<long long>(f.B) <= 2 * f.total_ctx;
    const bool head_rows = group > 8 && group <= 32;
    SplitPlan plan;
    // one 8-head column block (groups up to 8) runs two partition CTAs per SM behind this
    // lesson's reduce; behind a parallel one, one per SM measured faster (lesson 04's NOTES.md,
    // "Against cuDNN"); a partition of kLongPartition tokens or more streams at full rate alone
    // on its SM (one per SM suffices)
    const double target = 0.9 * f.sms * (group <= 8 && !f.parallel_reduce ? 2 : 1);
    auto enough = [&](long long ctas_at_p, long long p) {
        return ctas_at_p >= (even_batch && p >= kLongPartition ? 0.9 * f.sms : target);
    };
    // partition CTAs of the batch at partition size p; an uneven batch is summarised by its
    // total and its length, so count its partitions as if even, plus one per sequence
    auto partition_ctas = [&](long long p) {
        return even_batch ? (f.max_ctx + p - 1) / p * ctas : ((f.total_ctx + p - 1) / p + f.B - 1) * f.Hkv;
    };
    long long smallest = group == 8 ? 256 : 128;
    // the partition kernel behind this lesson's reduce, which walks the partitions one after
    // another: at most 16 partitions of the longest context
    if (!head_rows && !f.parallel_reduce)
        while (smallest * 16 < f.max_ctx) smallest *= 2;
    long long size = smallest;
    const long long largest = even_batch ? 1LL << 20 : kMixedLargest;
    for (long long p = largest; p >= smallest; p /= 2)
        if (enough(partition_ctas(p), p)) {
            size = p;
            break;
        }
    // a short context that the smallest partition cuts into fewer than 8 pieces: 64 tokens
    // (behind this lesson's reduce; a parallel one does better with 128-token unit copies)
    if (!f.parallel_reduce && size == smallest && f.max_ctx >= 512 &&
        num_partitions(f.max_ctx, static_cast<int>(size)) < 8)
        size = 64;
    plan.partition_size = static_cast<int>(size);
    plan.fused = group <= 2;
    plan.head_rows = head_rows;
    plan.flat_merge = head_rows;
    plan.units = size >= kUnitsSmallestPartition;
    plan.longest_first = !even_batch;
    const int parts = num_partitions(f.max_ctx, plan.partition_size);
    plan.cluster = head_rows && even_batch && parts >= 2 && parts <= kClusterMostParts;
    return plan;
}

Choice our_rule(const ShapeFacts& f) {
    const long long ctas = static_cast<long long>(f.B) * f.Hkv;
    const int group = f.H / f.Hkv;
    const bool even_batch = f.max_ctx * static_cast<long long>(f.B) <= 2 * f.total_ctx;
    Choice c;
    if (ctas >= 0.9 * f.sms && even_batch) return c;
    c.plan = our_plan(f);
    // one partition: the single pass, unless that is lesson 02's per-head kernel and the
    // partition kernel would copy units
    const bool tiny_grouped_grid = ctas < kTinyGroupedGrid;
    const bool head_rows = group > 8 && group <= 32;
    c.split = num_partitions(f.max_ctx, c.plan.partition_size) >= 2 || (tiny_grouped_grid && !head_rows && c.plan.units);
    return c;
}

}  // namespace lesson03
