// CPU reference for softmax paged decode, in double, from the already-rounded inputs.
//
//   out[b, h, :] = sum_t softmax_t(scale * q[b, h, :] . k[b, t, h / group, :]) * v[b, t, h / group, :]
//
// It reads its inputs only through logical (sequence, token, head, d) accessors, so it
// knows nothing of pages, block tables or memory layout: any `Inputs` type with
//   B() H() Hkv() D() ctx(seq) q(seq, head, d) k(seq, token, kv_head, d) v(...)
// works (pa::PagedDecodeView for the paged cache, a dense array in the tests).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "parallel.h"
#include "paged_cache.h"

namespace pa::reference {

// The score-to-P step of softmax attention, on one head's scaled scores s[0 .. n):
// p = exp(s - max s) / sum exp(s - max s). The gate of gated_reference.h is the other one.
struct SoftmaxP {
    std::vector<double> operator()(const std::vector<double>& s) const {
        double m = -INFINITY;
        for (double x : s) m = std::max(m, x);
        std::vector<double> p(s.size());
        double sum = 0;
        for (size_t t = 0; t < s.size(); ++t) sum += (p[t] = std::exp(s[t] - m));
        for (double& x : p) x /= sum;
        return p;
    }
};

// A decode with any score-to-P step: out[b, h, :] = sum_t to_p(s)_t v_t, s_t = scale * q.k_t.
// Returns out as [B, H, D]. A zero weight skips its V row (it adds nothing).
template <class Inputs, class ToP>
std::vector<double> decode_with_weights(const Inputs& in, double scale, const ToP& to_p) {
    const int B = in.B(), H = in.H(), Hkv = in.Hkv(), D = in.D();
    const int group = H / Hkv;
    std::vector<double> out(static_cast<size_t>(B) * H * D, 0.0);
    // One task per (sequence, KV head): its K and V are read once for the `group` query heads.
    parallel_for(static_cast<long long>(B) * Hkv, [&](long long task) {
        const int b = static_cast<int>(task / Hkv), kvh = static_cast<int>(task % Hkv);
        const int ctx = in.ctx(b);
        // [ctx, D] each
        std::vector<double> k(static_cast<size_t>(ctx) * D), v(static_cast<size_t>(ctx) * D), s(ctx);
        for (int t = 0; t < ctx; ++t)
            for (int d = 0; d < D; ++d) {
                k[static_cast<size_t>(t) * D + d] = in.k(b, t, kvh, d);
                v[static_cast<size_t>(t) * D + d] = in.v(b, t, kvh, d);
            }
        std::vector<double> q(D);
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
            for (int d = 0; d < D; ++d) q[d] = in.q(b, h, d);
            for (int t = 0; t < ctx; ++t) {
                double dot = 0;
                for (int d = 0; d < D; ++d) dot += q[d] * k[static_cast<size_t>(t) * D + d];
                s[t] = dot * scale;
            }
            const std::vector<double> p = to_p(s);
            double* o = &out[(static_cast<size_t>(b) * H + h) * D];
            for (int t = 0; t < ctx; ++t) {
                if (p[t] == 0.0) continue;  // adds nothing (for the gate: the V row lesson 05 never loads)
                for (int d = 0; d < D; ++d) o[d] += p[t] * v[static_cast<size_t>(t) * D + d];
            }
        }
    });
    return out;
}

// Returns out as [B, H, D].
template <class Inputs>
std::vector<double> softmax_decode(const Inputs& in, double scale) {
    return decode_with_weights(in, scale, SoftmaxP{});
}

// The reference for a generated paged problem.
inline std::vector<double> softmax_decode(const DecodeProblem& p) {
    return softmax_decode(PagedDecodeView(p), p.scale);
}

// Sliding-window attention (Mistral, Gemma): only the last `window` tokens of the context
// attend, tokens t >= n - window of scores s[0 .. n); the others get weight 0 (their V rows are
// skipped). A window >= n is full attention. Lesson 01's window exercise is checked with it.
struct SlidingWindowSoftmaxP {
    long long window = 0;  // >= 1
    std::vector<double> operator()(const std::vector<double>& s) const {
        const size_t n = s.size();
        const size_t first = static_cast<long long>(n) > window ? n - static_cast<size_t>(window) : 0;
        const std::vector<double> tail = SoftmaxP{}(std::vector<double>(s.begin() + static_cast<long long>(first), s.end()));
        std::vector<double> p(n, 0.0);
        std::copy(tail.begin(), tail.end(), p.begin() + static_cast<long long>(first));
        return p;
    }
};

// Returns out as [B, H, D].
template <class Inputs>
std::vector<double> sliding_window_decode(const Inputs& in, double scale, long long window) {
    return decode_with_weights(in, scale, SlidingWindowSoftmaxP{window});
}

inline std::vector<double> sliding_window_decode(const DecodeProblem& p, long long window) {
    return sliding_window_decode(PagedDecodeView(p), p.scale, window);
}

}  // namespace pa::reference
