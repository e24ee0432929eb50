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

// Returns out as [B, H, D].
template <class Inputs>
std::vector<double> softmax_decode(const Inputs& in, double scale) {
    const int B = in.B(), H = in.H(), Hkv = in.Hkv(), D = in.D();
    const int group = H / Hkv;
    std::vector<double> out(static_cast<size_t>(B) * H * D, 0.0);
    // One task per (sequence, KV head): its K and V are read once for the `group` query heads.
    parallel_for(static_cast<long long>(B) * Hkv, [&](long long task) {
        const int b = static_cast<int>(task / Hkv), kvh = static_cast<int>(task % Hkv);
        const int ctx = in.ctx(b);
        std::vector<double> k(static_cast<size_t>(ctx) * D), v(static_cast<size_t>(ctx) * D), logits(ctx);
        for (int t = 0; t < ctx; ++t)
            for (int d = 0; d < D; ++d) {
                k[static_cast<size_t>(t) * D + d] = in.k(b, t, kvh, d);
                v[static_cast<size_t>(t) * D + d] = in.v(b, t, kvh, d);
            }
        std::vector<double> q(D);
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
            for (int d = 0; d < D; ++d) q[d] = in.q(b, h, d);
            double m = -INFINITY;
            for (int t = 0; t < ctx; ++t) {
                double s = 0;
                for (int d = 0; d < D; ++d) s += q[d] * k[static_cast<size_t>(t) * D + d];
                logits[t] = s * scale;
                m = std::max(m, logits[t]);
            }
            double sum = 0;
            for (int t = 0; t < ctx; ++t) sum += (logits[t] = std::exp(logits[t] - m));
            double* o = &out[(static_cast<size_t>(b) * H + h) * D];
            for (int t = 0; t < ctx; ++t) {
                const double p = logits[t] / sum;
                for (int d = 0; d < D; ++d) o[d] += p * v[static_cast<size_t>(t) * D + d];
            }
        }
    });
    return out;
}

// The reference for a generated paged problem.
inline std::vector<double> softmax_decode(const DecodeProblem& p) {
    return softmax_decode(PagedDecodeView(p), p.scale);
}

}  // namespace pa::reference
