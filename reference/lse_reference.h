// CPU reference for the log-sum-exp of softmax decode, in double: what a split-k kernel returns
// beside its output so that a server can merge attention over two KV segments of one sequence
// (cascade / shared-prefix attention: the prefix's attention once for many requests, each
// request's own suffix apart). Lesson 03's `lse` exercise is checked with it.
//
//   lse[b, h] = log sum_t exp(s_t),   s_t = scale * q[b, h, :] . k[b, t, h / group, :]
//
// the natural log, of the same scaled scores the softmax reads (FlashAttention's softmax_lse).
// Merging two segments A and B of one row (merge_states):
//   lse = log(e^lse_A + e^lse_B),   out = e^(lse_A - lse) out_A + e^(lse_B - lse) out_B
// which is exactly the softmax over A and B together.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "paged_cache.h"
#include "parallel.h"

namespace pa::reference {

// The log-sum-exp of scores s[0 .. n), computed as m + log sum e^(s - m) so that it cannot
// overflow. -inf for no scores (an empty segment: it then gets weight 0 in merge_states).
inline double log_sum_exp(const std::vector<double>& s) {
    double m = -INFINITY;
    for (double x : s) m = std::max(m, x);
    if (m == -INFINITY) return -INFINITY;
    double sum = 0;
    for (double x : s) sum += std::exp(x - m);
    return m + std::log(sum);
}

// The scaled scores of tokens [t_begin, t_end) of row (b, h); t_end is clamped to the context.
template <class Inputs>
std::vector<double> row_scores(const Inputs& in, double scale, int b, int h, int t_begin, int t_end) {
    const int D = in.D(), kvh = h / (in.H() / in.Hkv());
    t_end = std::min(t_end, in.ctx(b));
    std::vector<double> s;
    for (int t = t_begin; t < t_end; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += in.q(b, h, d) * in.k(b, t, kvh, d);
        s.push_back(dot * scale);
    }
    return s;
}

// lse of every row over its whole context, as [B, H].
template <class Inputs>
std::vector<double> softmax_lse(const Inputs& in, double scale) {
    const int B = in.B(), H = in.H();
    std::vector<double> lse(static_cast<size_t>(B) * H);
    parallel_for(static_cast<long long>(B) * H, [&](long long row) {
        const int b = static_cast<int>(row / H), h = static_cast<int>(row % H);
        lse[static_cast<size_t>(row)] = log_sum_exp(row_scores(in, scale, b, h, 0, in.ctx(b)));
    });
    return lse;
}

// The reference for a generated paged problem.
inline std::vector<double> softmax_lse(const DecodeProblem& p) { return softmax_lse(PagedDecodeView(p), p.scale); }

// Attention of one row over tokens [t_begin, t_end) only (a KV segment): out [D] and its lse.
// An empty segment gives out 0 and lse -inf.
struct SegmentState {
    std::vector<double> out;
    double lse = -INFINITY;
};
template <class Inputs>
SegmentState segment_attention(const Inputs& in, double scale, int b, int h, int t_begin, int t_end) {
    const int D = in.D(), kvh = h / (in.H() / in.Hkv());
    const std::vector<double> s = row_scores(in, scale, b, h, t_begin, t_end);
    SegmentState r;
    r.out.assign(static_cast<size_t>(D), 0.0);
    r.lse = log_sum_exp(s);
    for (size_t i = 0; i < s.size(); ++i) {
        const double p = std::exp(s[i] - r.lse);
        for (int d = 0; d < D; ++d) r.out[static_cast<size_t>(d)] += p * in.v(b, t_begin + static_cast<int>(i), kvh, d);
    }
    return r;
}

// Two segments' states of one row merged into the state of both together (see the top).
inline SegmentState merge_states(const SegmentState& a, const SegmentState& b) {
    SegmentState r;
    r.out.assign(a.out.size(), 0.0);
    const double m = std::max(a.lse, b.lse);
    if (m == -INFINITY) return r;  // both empty
    r.lse = m + std::log(std::exp(a.lse - m) + std::exp(b.lse - m));
    const double wa = std::exp(a.lse - r.lse), wb = std::exp(b.lse - r.lse);
    for (size_t d = 0; d < r.out.size(); ++d) r.out[d] = wa * a.out[d] + wb * b.out[d];
    return r;
}

}  // namespace pa::reference
