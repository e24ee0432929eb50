// Lesson 03's exercise grader, the host-only part the CPU tests prove without a GPU: the case
// whose every logit is far below zero, the log-sum-exp comparison and its named wrong answers,
// and the split-k suspects that need the partition size.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "decode_reference.h"
#include "lse_reference.h"
#include "paged_cache.h"
#include "split_plan.h"
#include "table.h"

namespace lesson03_exercise {

// Pushes every logit of the problem far below zero: K + 1 (K is drawn in [-1, 1), so every
// element becomes positive) and q - shift. A logit's mean is then -shift * D * scale
// (-24 * sqrt(D): -271 at D 128, -192 at D 64) and its spread about 14, so the max of any
// sequence stays below -88, where exp(logit - 0) is 0 in fp32: a sentinel m = 0 (instead of
// -inf) then makes the reduce's sum 0 for a sequence with sentinels. NaN slots stay NaN.
inline void make_logits_negative(pa::DecodeProblem& p, double shift = 24.0) {
    const pa::DType t = p.shape.dtype;
    for (auto& x : p.q) x = pa::encode(t, static_cast<float>(pa::decode(t, x) - shift));
    for (auto& x : p.cache.k) {
        const double v = pa::decode(t, x);
        if (std::isfinite(v)) x = pa::encode(t, static_cast<float>(v + 1.0));
    }
}

// The largest scaled score of every row, [B, H] (-inf for an empty row).
inline std::vector<double> row_max_scores(const pa::DecodeProblem& p) {
    const pa::PagedDecodeView v(p);
    std::vector<double> m(static_cast<size_t>(v.B()) * v.H(), -INFINITY);
    for (int b = 0; b < v.B(); ++b)
        for (int h = 0; h < v.H(); ++h)
            for (double s : pa::reference::row_scores(v, p.scale, b, h, 0, v.ctx(b)))
                m[static_cast<size_t>(b) * v.H() + h] = std::max(m[static_cast<size_t>(b) * v.H() + h], s);
    return m;
}

// The lse of one partition of every row, [B, H]: tokens [part * P, (part + 1) * P); -inf for
// a partition past the row's end (the sentinel's m + log l = -inf + log 0).
inline std::vector<double> partition_lse(const pa::DecodeProblem& p, int partition_size, int part) {
    const pa::PagedDecodeView v(p);
    std::vector<double> out(static_cast<size_t>(v.B()) * v.H());
    for (int b = 0; b < v.B(); ++b)
        for (int h = 0; h < v.H(); ++h)
            out[static_cast<size_t>(b) * v.H() + h] = pa::reference::log_sum_exp(
                pa::reference::row_scores(v, p.scale, b, h, part * partition_size, (part + 1) * partition_size));
    return out;
}

// An lse matches its reference within 1e-3 * (1 + |ref|): fp32 logits and __expf, at logits up
// to the thousands (large-logits). Equal infinities match (a suspect may hold -inf).
inline bool lse_close(double got, double ref) {
    if (!std::isfinite(got) || !std::isfinite(ref)) return got == ref;
    return std::fabs(got - ref) <= 1e-3 * (1.0 + std::fabs(ref));
}

inline bool lse_matches(const std::vector<float>& got, const std::vector<double>& ref) {
    if (got.size() != ref.size()) return false;
    for (size_t i = 0; i < got.size(); ++i)
        if (!lse_close(got[i], ref[i])) return false;
    return true;
}

// A known wrong log-sum-exp, for naming a failure.
struct LseSuspect {
    std::string message;
    std::function<std::vector<double>()> lse;  // [B, H]
};

// The wrong answers the grader names: log base 2, the max left out, one partition only, zeros.
inline std::vector<LseSuspect> lse_suspects(const pa::DecodeProblem& p, int partition_size) {
    const std::vector<double> ref = pa::reference::softmax_lse(p);
    const int last = lesson03::num_partitions(p.shape.max_ctx(), partition_size) - 1;
    std::vector<LseSuspect> out;
    out.push_back({"the log-sum-exp is in base 2 (log2 of the sum): it must be the natural log, as exp() reads it",
                   [ref] {
                       std::vector<double> r(ref);
                       for (double& x : r) x /= std::log(2.0);
                       return r;
                   }});
    out.push_back({"the log-sum-exp leaves out the max: log(sum_p e^(m_p - M) l_p) is the lse minus M; add M back",
                   [ref, &p] {
                       const std::vector<double> m = row_max_scores(p);
                       std::vector<double> r(ref);
                       for (size_t i = 0; i < r.size(); ++i) r[i] -= m[i];
                       return r;
                   }});
    out.push_back({pa::strf("the log-sum-exp is the grid's last partition's (partition %d) alone: the lse needs the "
                            "sum over every partition",
                            last),
                   [&p, partition_size, last] { return partition_lse(p, partition_size, last); }});
    out.push_back({"the log-sum-exp is partition 0's alone: the lse needs the sum over every partition",
                   [&p, partition_size] { return partition_lse(p, partition_size, 0); }});
    out.push_back({"the log-sum-exp is all zeros", [ref] { return std::vector<double>(ref.size(), 0.0); }});
    return out;
}

// "" if `got` matches the reference lse of `p`, else one line: a matching suspect's message,
// or how many rows are NaN (unwritten: the grader poisons the buffer) or wrong.
inline std::string check_lse(const std::vector<float>& got, const pa::DecodeProblem& p, int partition_size) {
    const std::vector<double> ref = pa::reference::softmax_lse(p);
    if (lse_matches(got, ref)) return "";
    for (const LseSuspect& s : lse_suspects(p, partition_size))
        if (lse_matches(got, s.lse())) return s.message;
    long long nan = 0, wrong = 0;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
        if (std::isnan(got[i])) {
            ++nan;
        } else if (!lse_close(got[i], ref[i])) {
            ++wrong;
            const double e = std::isfinite(got[i]) ? std::fabs(got[i] - ref[i]) : INFINITY;
            if (e >= worst) worst = e, at = i;
        }
    }
    if (nan > 0)
        return pa::strf("%lld of %zu log-sum-exp values are NaN: not written (the grader fills the buffer with NaN "
                        "before every launch) or computed from NaN",
                        nan, got.size());
    return pa::strf("%lld of %zu log-sum-exp values are wrong (worst: row %zu, %.6g instead of %.6g)", wrong, got.size(),
                    at, static_cast<double>(got[at]), ref[at]);
}

// The output of a reduce that stops one partition short: each sequence's tokens before the
// grid's last partition (an empty row reads 0 here; the kernel's 0/0 is NaN and named first).
inline std::vector<double> decode_without_last_partition(const pa::DecodeProblem& p, int partition_size) {
    pa::DecodeProblem cut = p;
    const int last = lesson03::num_partitions(p.shape.max_ctx(), partition_size) - 1;
    for (int& c : cut.table.context_lens) c = std::min(c, last * partition_size);
    return pa::reference::softmax_decode(cut);
}

}  // namespace lesson03_exercise
