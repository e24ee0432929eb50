// Lesson 03 on the CPU: the recombination math of split-k (the host model of its reduce),
// the partition plans, and each single-pass/split-k rule on the shapes the lesson measures.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "random.h"
#include "split_plan.h"

using lesson03::PartitionState;

namespace {

struct Sequence {
    std::vector<double> logits;
    std::vector<std::vector<double>> v;
};

// Integer-valued logits and V rows: exact in double, so equalities below are exact.
Sequence make_sequence(int ctx, int D, uint64_t seed) {
    pa::Rng rng(seed);
    Sequence s;
    for (int t = 0; t < ctx; ++t) {
        s.logits.push_back(static_cast<double>(static_cast<int>(rng.below(17)) - 8));
        std::vector<double> row;
        for (int d = 0; d < D; ++d) row.push_back(static_cast<double>(static_cast<int>(rng.below(9)) - 4));
        s.v.push_back(row);
    }
    return s;
}

std::vector<double> direct_softmax(const Sequence& s) {
    return lesson03::merge_states({lesson03::partition_state(s.logits, s.v, 0, static_cast<int>(s.logits.size()))});
}

std::vector<PartitionState> split(const Sequence& s, int partition) {
    std::vector<PartitionState> parts;
    const int ctx = static_cast<int>(s.logits.size());
    for (int b = 0; b < ctx; b += partition) parts.push_back(lesson03::partition_state(s.logits, s.v, b, std::min(ctx, b + partition)));
    return parts;
}

}  // namespace

TEST_CASE("split-k: splitting a context anywhere gives the unsplit result", "[cpu][split_k]") {
    for (int ctx : {1, 2, 31, 32, 33, 513, 1000}) {
        const Sequence s = make_sequence(ctx, 8, 1000 + ctx);
        const std::vector<double> whole = direct_softmax(s);
        for (int partition : {1, 3, 32, 64, 512, 4096}) {
            CAPTURE(ctx, partition);
            const std::vector<double> merged = lesson03::merge_states(split(s, partition));
            for (size_t d = 0; d < whole.size(); ++d) CHECK(std::abs(merged[d] - whole[d]) <= 1e-12 * (1 + std::abs(whole[d])));
        }
    }
}

TEST_CASE("split-k: sentinel partitions (-inf, 0, 0) change nothing, bit for bit, with no mask", "[cpu][split_k]") {
    const Sequence s = make_sequence(513, 8, 7);  // 17 partitions of 32
    std::vector<PartitionState> parts = split(s, 32);
    REQUIRE(parts.size() == 17);
    const std::vector<double> before = lesson03::merge_states(parts);
    const PartitionState sentinel = lesson03::partition_state(s.logits, s.v, 513, 513);  // an empty partition
    CHECK(std::isinf(sentinel.m));
    CHECK(sentinel.m < 0);
    CHECK(sentinel.l == 0);
    for (int pad = 0; pad < 15; ++pad) parts.push_back(sentinel);  // 17 -> 32, as a grid sized for a longer sequence
    const std::vector<double> after = lesson03::merge_states(parts);
    CHECK(after == before);
    // a sentinel first, too: the max skips it and its weight is exp(-inf - M) = 0, never NaN
    parts.insert(parts.begin(), sentinel);
    const std::vector<double> front = lesson03::merge_states(parts);
    CHECK(front == before);
    for (double x : front) CHECK_FALSE(std::isnan(x));
}

TEST_CASE("split plans: partition counts, even splits and names", "[cpu][split_k]") {
    CHECK(lesson03::num_partitions(513, 32) == 17);
    CHECK(lesson03::num_partitions(1, 512) == 1);
    CHECK(lesson03::num_partitions(131072, 128) == 1024);
    lesson03::SplitPlan fixed;
    fixed.partition_size = 256;
    CHECK(lesson03::grid_partitions(fixed, 4096) == 16);
    CHECK(lesson03::plan_name(fixed) == "split_k_256");
    fixed.fused = true;
    CHECK(lesson03::plan_name(fixed) == "split_k_fused_256");
    lesson03::SplitPlan even;
    even.partition_size = 0;
    even.splits = 8;
    CHECK(lesson03::plan_name(even) == "split_k_even8");
    fixed.head_rows = true;
    CHECK(lesson03::plan_name(fixed) == "split_k_rows_fused_256");
    even.head_rows = true;
    CHECK(lesson03::plan_name(even) == "split_k_rows_even8");
    even.head_rows = false;
    CHECK(lesson03::grid_partitions(even, 264) == 8);
    // every sequence of a batch fits the grid's 8 partitions, whatever its length
    for (int ctx = 1; ctx <= 5000; ++ctx) {
        const int tokens = lesson03::partition_tokens(even, ctx);
        CAPTURE(ctx, tokens);
        CHECK(tokens % 32 == 0);
        CHECK(lesson03::num_partitions(ctx, tokens) <= 8);
    }
}

TEST_CASE("single-pass/split-k rules decide as stated", "[cpu][split_k]") {
    auto facts = [](int B, int H, int Hkv, int ctx) {
        lesson03::ShapeFacts f;
        f.B = B;
        f.H = H;
        f.Hkv = Hkv;
        f.max_ctx = ctx;
        f.total_ctx = static_cast<long long>(B) * ctx;
        f.sms = 132;
        return f;
    };
    // the L4 post's rules (B * Hkv against the SMs, segments of 512)
    CHECK(lesson03::post_rule_1(facts(16, 32, 1, 4096)).split);        // 16 CTAs, 8 segments
    CHECK_FALSE(lesson03::post_rule_1(facts(1, 32, 32, 512)).split);   // 1 segment
    CHECK_FALSE(lesson03::post_rule_1(facts(16, 64, 8, 8192)).split);  // 128 CTAs >= 99
    CHECK(lesson03::post_rule_1(facts(1, 32, 32, 1024)).split);        // 32 CTAs, 2 segments
    CHECK_FALSE(lesson03::post_rule_2(facts(1, 32, 32, 1024)).split);  // 2 segments < 4
    CHECK(lesson03::post_rule_2(facts(1, 32, 32, 4096)).split);
    CHECK(lesson03::post_rule_2(facts(4, 64, 8, 4096)).split);         // 32 CTAs < 66, 8 segments
    CHECK_FALSE(lesson03::post_rule_2(facts(16, 32, 8, 4096)).split);  // 128 CTAs
    // vLLM: v1 when max_ctx <= 8192 and (one partition, or B * H > 512)
    CHECK_FALSE(lesson03::vllm_rule(facts(1, 32, 32, 512)).split);
    CHECK(lesson03::vllm_rule(facts(1, 32, 32, 1024)).split);
    CHECK_FALSE(lesson03::vllm_rule(facts(32, 32, 32, 1024)).split);  // B * H = 1024 > 512
    CHECK(lesson03::vllm_rule(facts(1, 64, 8, 16384)).split);          // past 8192
    // split count: min(ceil(SMs / (B * Hkv)), ctx / 64)
    const lesson03::Choice sc = lesson03::split_count_rule(facts(1, 12, 2, 4096));
    CHECK(sc.split);
    CHECK(sc.plan.splits == 64);  // ceil(132 / 2) = 66, 4096 / 64 = 64
    CHECK(lesson03::split_count_rule(facts(1, 12, 2, 128)).plan.splits == 2);
    CHECK_FALSE(lesson03::split_count_rule(facts(8, 32, 32, 2048)).split);  // 256 CTAs: 1 split
    // ours: single pass once B * Hkv fills 90 % of the SMs (an even batch); else the largest
    // power-of-two partition whose CTAs still give every SM one (two for groups up to 8)
    CHECK_FALSE(lesson03::our_rule(facts(8, 32, 32, 2048)).split);
    CHECK_FALSE(lesson03::our_rule(facts(16, 64, 8, 8192)).split);  // 128 CTAs >= 118.8
    const lesson03::Choice mqa = lesson03::our_rule(facts(16, 32, 1, 4096));
    CHECK(mqa.split);
    CHECK(mqa.plan.partition_size == 512);  // 16 * 8 = 128 CTAs >= 118.8
    CHECK_FALSE(mqa.plan.fused);            // 32 heads to merge
    CHECK(mqa.plan.head_rows);              // a group of 32: the heads as mma rows
    CHECK(mqa.plan.flat_merge);             // merged by step 7's flat merge
    CHECK_FALSE(mqa.plan.cluster);          // 8 partitions: more than step 8's cluster merges
    const lesson03::Choice mqa2 = lesson03::our_rule(facts(64, 32, 1, 2048));
    CHECK(mqa2.plan.partition_size == 1024);  // 64 * 2 = 128 CTAs
    CHECK(mqa2.plan.cluster);                 // 2 partitions: merged in a cluster (step 8)
    CHECK(lesson03::our_rule(facts(32, 32, 1, 4096)).plan.cluster);        // 4 partitions of 1024
    CHECK_FALSE(lesson03::our_rule(facts(1, 32, 32, 2048)).plan.cluster);  // group 1: no head rows
    CHECK(lesson03::our_rule(facts(1, 48, 4, 4096)).plan.head_rows);                // group 12
    CHECK_FALSE(lesson03::our_rule(facts(1, 64, 8, 4096)).plan.head_rows);          // group 8: columns fit
    CHECK_FALSE(lesson03::our_rule(facts(1, 64, 8, 4096)).plan.flat_merge);         // the head-row kernel's only
    const lesson03::Choice mha = lesson03::our_rule(facts(1, 32, 32, 1024));
    CHECK(mha.plan.partition_size == 128);  // 32 * 8 = 256 CTAs >= 237.6 (two per SM)
    CHECK(mha.plan.fused);
    CHECK(mha.plan.units);  // the partition kernel, a tile a partition: unit copies
    CHECK_FALSE(lesson03::our_rule(facts(1, 12, 2, 512)).plan.units);   // partitions of 64: half a tile
    CHECK(lesson03::our_rule(facts(16, 32, 1, 4096)).plan.units);        // head rows copy units too
    CHECK(lesson03::our_rule(facts(1, 64, 8, 4096)).plan.partition_size == 256);     // group 8: 256 at least
    CHECK(lesson03::our_rule(facts(4, 64, 8, 2048)).plan.partition_size == 256);     // 32 * 8 = 256 CTAs
    CHECK_FALSE(lesson03::our_rule(facts(4, 64, 8, 2048)).plan.fused);
    CHECK(lesson03::our_rule(facts(1, 64, 8, 131072)).plan.partition_size == 8192);  // long: one per SM, 8 * 16 = 128
    CHECK(lesson03::our_rule(facts(1, 12, 2, 512)).plan.partition_size == 64);       // short: 8 pieces of 64
    CHECK(lesson03::our_rule(facts(1, 28, 4, 4096)).plan.partition_size == 256);     // at least 4096 / 16
    {  // behind a parallel reduce (lesson 04's): no floor of 1/16, no 64-token pieces
        lesson03::ShapeFacts f = facts(1, 28, 4, 4096);
        f.parallel_reduce = true;
        CHECK(lesson03::our_rule(f).plan.partition_size == 128);
        f = facts(1, 12, 2, 512);
        f.parallel_reduce = true;
        CHECK(lesson03::our_rule(f).plan.partition_size == 128);
        CHECK(lesson03::our_rule(f).plan.units);
        f = facts(1, 32, 32, 4096);  // group 1: two CTAs an SM behind the serial reduce, one behind a parallel one
        CHECK(lesson03::our_rule(f).plan.partition_size == 512);   // 32 * 8 = 256 CTAs
        f.parallel_reduce = true;
        CHECK(lesson03::our_rule(f).plan.partition_size == 1024);  // 32 * 4 = 128 CTAs
        f = facts(1, 32, 1, 4096);  // head rows: one CTA an SM behind either reduce
        const int serial = lesson03::our_rule(f).plan.partition_size;
        f.parallel_reduce = true;
        CHECK(lesson03::our_rule(f).plan.partition_size == serial);
    }
    CHECK(lesson03::our_rule(facts(1, 28, 4, 2048)).plan.partition_size == 128);
    CHECK(lesson03::our_rule(facts(1, 32, 1, 4096)).plan.partition_size == 128);     // MQA B1: as small as allowed
    // one partition of 128 on a grouped grid of 2 CTAs, where lesson 02's auto runs its per-head
    // kernel: the partition kernel with unit copies (auto falls back to the single pass where
    // units cannot run); a grid of 32 grouped CTAs keeps the single pass
    const lesson03::Choice tiny = lesson03::our_rule(facts(1, 12, 2, 128));
    CHECK(tiny.split);
    CHECK(tiny.plan.units);
    CHECK(lesson03::grid_partitions(tiny.plan, 128) == 1);
    CHECK_FALSE(lesson03::our_rule(facts(1, 32, 32, 128)).split);
    CHECK(lesson03::our_rule(facts(1, 12, 2, 100)).split);  // 100 tokens: still one unit-copy partition
    CHECK_FALSE(lesson03::our_rule(facts(1, 32, 1, 128)).split);  // MQA: head rows, whose one partition does not pay
    CHECK_FALSE(lesson03::our_rule(facts(1, 32, 32, 64)).split);
    // a batch of mixed lengths: split even with a full grid, partitions of at most 4096,
    // longest first; two CTAs per SM wanted even at 4096 tokens (the short sequences' CTAs are short)
    lesson03::ShapeFacts mixed = facts(16, 64, 8, 32768);
    mixed.total_ctx = 107000;
    const lesson03::Choice m = lesson03::our_rule(mixed);
    CHECK(m.split);
    CHECK(m.plan.partition_size == 4096);  // (27 + 15) * 8 = 336 CTAs >= 237.6
    CHECK(m.plan.longest_first);
    CHECK(m.plan.units);
    mixed.max_ctx = 4096;  // fewer tokens: 4096 gives 160 CTAs, 2048 (10 + 15) * 8 = 200, 1024 280 >= 237.6
    mixed.total_ctx = 20000;
    CHECK(lesson03::our_rule(mixed).plan.partition_size == 1024);
    CHECK(lesson03::our_rule(mixed).plan.longest_first);
    CHECK_FALSE(lesson03::our_rule(facts(1, 64, 8, 131072)).plan.longest_first);  // one length: the grid's order
}

TEST_CASE("longest_first_order: every cell once, the longest partitions first, ties in the grid's order") {
    lesson03::SplitPlan p;
    p.partition_size = 256;
    p.longest_first = true;
    CHECK(lesson03::plan_name(p) == "split_k_lpt_256");
    p.units = true;
    CHECK(lesson03::plan_name(p) == "split_k_units_lpt_256");
    const std::vector<int> ctx = {300, 1, 1024, 700, 256};
    const int parts = lesson03::grid_partitions(p, 1024);  // 4
    const std::vector<lesson03::Cell> order = lesson03::longest_first_order(p, ctx, parts);
    REQUIRE(order.size() == ctx.size() * parts);
    auto tokens = [&](const lesson03::Cell& c) { return std::max(0, std::min(256, ctx[c.seq] - c.part * 256)); };
    std::set<std::pair<int, int>> seen;
    for (size_t i = 0; i < order.size(); ++i) {
        seen.insert({order[i].seq, order[i].part});
        if (i == 0) continue;
        const lesson03::Cell a = order[i - 1], b = order[i];
        CHECK(tokens(a) >= tokens(b));
        if (tokens(a) == tokens(b)) CHECK(std::make_pair(a.part, a.seq) < std::make_pair(b.part, b.seq));
    }
    CHECK(seen.size() == order.size());  // a permutation of the grid's cells
    // the full partitions (256 tokens) in grid order, then 188 (700), 44 (300), 1 (1), then the empty ones
    const std::vector<std::pair<int, int>> head = {{0, 0}, {2, 0}, {3, 0}, {4, 0}, {2, 1}, {3, 1}, {2, 2}, {2, 3},
                                                   {3, 2}, {0, 1}, {1, 0}};
    for (size_t i = 0; i < head.size(); ++i) {
        CHECK(order[i].seq == head[i].first);
        CHECK(order[i].part == head[i].second);
    }
    for (size_t i = head.size(); i < order.size(); ++i) CHECK(tokens(order[i]) == 0);
    // even lengths, whole partitions: the grid's own order
    const std::vector<lesson03::Cell> even = lesson03::longest_first_order(p, {512, 512, 512}, 2);
    for (size_t i = 0; i < even.size(); ++i) {
        CHECK(even[i].seq == static_cast<int>(i % 3));
        CHECK(even[i].part == static_cast<int>(i / 3));
    }
    // even splits: each sequence cut its own way, still a permutation, longest first
    lesson03::SplitPlan splits;
    splits.partition_size = 0;
    splits.splits = 3;
    const std::vector<lesson03::Cell> s3 = lesson03::longest_first_order(splits, {1000, 40, 97}, 3);
    REQUIRE(s3.size() == 9);
    CHECK(s3[0].seq == 0);  // 352 tokens: the longest partition
    CHECK(s3[5].seq == 1);  // 40 tokens split 3 ways in 32s: 32, 8, then an empty one
    CHECK(s3[6].seq == 1);
    CHECK(s3.back().seq == 2);  // the empty ones last, in the grid's order: (1, 2), then (2, 2)
    CHECK(s3.back().part == 2);
}

TEST_CASE("plan names parse back: parse_plan_name(plan_name(p)) == p for every kind of plan; other text is refused",
          "[cpu][split_k]") {
    std::vector<lesson03::SplitPlan> plans;
    int splits = 0;
    for (int size : {1, 32, 64, 96, 128, 256, 512, 1024, 4096, 8192, 131072}) {
        ++splits;  // a split count of its own for each size
        for (int bits = 0; bits < 64; ++bits) {  // fused, head rows, units, longest first, flat merge, cluster: every mix
            lesson03::SplitPlan p;
            p.partition_size = size;
            p.fused = bits & 1;
            p.head_rows = bits & 2;
            p.units = bits & 4;
            p.longest_first = bits & 8;
            p.flat_merge = bits & 16;
            p.cluster = bits & 32;
            plans.push_back(p);
            lesson03::SplitPlan e = p;  // the same mix with even splits
            e.partition_size = 0;
            e.splits = splits * 7;
            plans.push_back(e);
        }
        for (int tgs : {4, 8, 16})
            for (bool fused : {false, true}) {  // the steps: tgs, fused and the size only
                lesson03::SplitPlan s;
                s.tgs = tgs;
                s.fused = fused;
                s.partition_size = size;
                plans.push_back(s);
            }
    }
    std::set<std::string> names;
    for (const auto& p : plans) {
        const std::string name = lesson03::plan_name(p);
        INFO(name);
        names.insert(name);
        lesson03::SplitPlan back;
        back.partition_size = -7;  // overwritten on success
        REQUIRE(lesson03::parse_plan_name(name, &back));
        CHECK(back == p);
    }
    CHECK(names.size() == plans.size());  // one name per plan
    // the names the lesson's variants carry
    lesson03::SplitPlan p;
    REQUIRE(lesson03::parse_plan_name("split_k_units_lpt_4096", &p));
    CHECK((p.units && p.longest_first && !p.fused && !p.head_rows && p.partition_size == 4096 && p.splits == 0 && p.tgs == 0));
    REQUIRE(lesson03::parse_plan_name("fused_merge_tgs8_256", &p));
    CHECK((p.tgs == 8 && p.fused && p.partition_size == 256));
    REQUIRE(lesson03::parse_plan_name("split_k_rows_even8", &p));
    CHECK((p.head_rows && p.splits == 8 && p.partition_size == 0));
    REQUIRE(lesson03::parse_plan_name("split_k_rows_units_lpt_flat_1024", &p));
    CHECK((p.head_rows && p.units && p.longest_first && p.flat_merge && !p.fused && p.partition_size == 1024));
    REQUIRE(lesson03::parse_plan_name("split_k_rows_units_flat_cluster_1024", &p));
    CHECK((p.head_rows && p.units && p.flat_merge && p.cluster && !p.longest_first && !p.fused && p.partition_size == 1024));
    // not names of plans: the parser refuses them and leaves *out alone
    const lesson03::SplitPlan untouched = p;
    for (const char* bad : {"", "split_k", "split_k_", "split_k_0", "split_k_-5", "split_k_0256", "split_k_256x",
                            "split_k_ 256", "split_k_fused_rows_256", "split_k_lpt_units_256", "split_k_rows_flat_lpt_256",
                            "split_k_rows_fused_flat_256", "split_k_fused_fused_256", "split_k_rows_cluster_flat_256",
                            "split_k_rows_flat_fused_cluster_256",
                            "split_k_even", "split_k_even0", "split_k_even8_256", "split_k_1234567890", "split_k_rows_",
                            "split_k_even", "partitions_tgs8", "partitions_tgs8_", "partitions_tgs_256", "partitions_tgs0_256",
                            "partitions_tgs8_256_", "fused_merge_tgs8_0", "fused_merge_256", "single_pass", "auto",
                            "SPLIT_K_256", "split_k_256 ", "xsplit_k_256"}) {
        INFO("'" << bad << "'");
        CHECK_FALSE(lesson03::parse_plan_name(bad, &p));
        CHECK(p == untouched);
    }
}
