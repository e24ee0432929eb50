// CPU reference for causal prefill over a paged cache with a prefix (lesson 06), in double, from
// the already-rounded inputs, for softmax and for the FIR gate: one body, the score-to-P step a
// policy (as in the lesson's kernel).
//
// Sequence b has prefix(b) >= 0 tokens already cached and new_len(b) >= 1 new ones, whose K/V
// are in the cache too, right after the prefix (positions prefix .. prefix + new_len - 1).
// New token i (0-based among the new ones) attends causally to positions 0 .. prefix + i:
//
//   s_t = scale * q[b, i, h, :] . k[b, t, h / group, :]      t = 0 .. prefix + i
//   P   = softmax(s)  or  the gate of gated_reference.h over that row (r before position 0 is 0)
//   out[row(b) + i, h, :] = sum_t P_t * v[b, t, h / group, :]
//
// so row i is exactly a decode with ctx = prefix + i + 1 (lesson 06's first step runs it so).
// out is [total new tokens, H, D], sequences concatenated: row(b) = new_len(0) + .. + new_len(b-1).
//
// It reads its inputs only through logical accessors; any `Inputs` type with
//   B() H() Hkv() D()
//   prefix(seq) new_len(seq)
//   q(seq, i, head, d)                  i in 0 .. new_len - 1
//   k(seq, pos, kv_head, d) v(...)      pos in 0 .. prefix + new_len - 1
// works (a dense array in the tests, a paged view of the cache in lesson 06).
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "gated_reference.h"
#include "parallel.h"

namespace pa::reference {

// Score-to-P policies: one query row's scaled scores over positions 0 .. n-1 -> weights [n].
// SoftmaxP (decode_reference.h) and GateP (gated_reference.h).

// First output row of each sequence, and the total in the last entry: [B + 1].
template <class Inputs>
std::vector<long long> prefill_rows(const Inputs& in) {
    std::vector<long long> rows(in.B() + 1, 0);
    for (int b = 0; b < in.B(); ++b) rows[b + 1] = rows[b] + in.new_len(b);
    return rows;
}

// Returns out as [total new tokens, H, D].
template <class Inputs, class ScoreToP>
std::vector<double> causal_prefill(const Inputs& in, double scale, const ScoreToP& to_p) {
    const int B = in.B(), H = in.H(), Hkv = in.Hkv(), D = in.D();
    if (Hkv < 1 || H % Hkv != 0) {
        std::ostringstream msg;
        msg << "causal_prefill: H must be a multiple of Hkv (got H " << H << ", Hkv " << Hkv << ")";
        throw std::invalid_argument(msg.str());
    }
    for (int b = 0; b < B; ++b)
        if (in.prefix(b) < 0 || in.new_len(b) < 1) {
            std::ostringstream msg;
            msg << "causal_prefill: sequence " << b << " needs prefix >= 0 and new_len >= 1 (got prefix "
                << in.prefix(b) << ", new_len " << in.new_len(b) << ")";
            throw std::invalid_argument(msg.str());
        }
    const int group = H / Hkv;
    const std::vector<long long> rows = prefill_rows(in);
    std::vector<double> out(static_cast<size_t>(rows[B]) * H * D, 0.0);
    // One task per (sequence, KV head): its K and V are read once for every new token of the
    // `group` query heads. Tasks write disjoint rows.
    parallel_for(static_cast<long long>(B) * Hkv, [&](long long task) {
        const int b = static_cast<int>(task / Hkv), kvh = static_cast<int>(task % Hkv);
        const int prefix = in.prefix(b), n = in.new_len(b), total = prefix + n;
        // [total, D] each
        std::vector<double> k(static_cast<size_t>(total) * D), v(static_cast<size_t>(total) * D);
        for (int t = 0; t < total; ++t)
            for (int d = 0; d < D; ++d) {
                k[static_cast<size_t>(t) * D + d] = in.k(b, t, kvh, d);
                v[static_cast<size_t>(t) * D + d] = in.v(b, t, kvh, d);
            }
        std::vector<double> q(D), s;
        for (int h = kvh * group; h < (kvh + 1) * group; ++h)
            for (int i = 0; i < n; ++i) {
                const int ctx = prefix + i + 1;  // causal: the prefix, then new tokens 0 .. i
                for (int d = 0; d < D; ++d) q[d] = in.q(b, i, h, d);
                s.resize(ctx);
                for (int t = 0; t < ctx; ++t) {
                    double dot = 0;
                    for (int d = 0; d < D; ++d) dot += q[d] * k[static_cast<size_t>(t) * D + d];
                    s[t] = dot * scale;
                }
                const std::vector<double> p = to_p(s);  // [ctx]
                double* o = &out[(static_cast<size_t>(rows[b] + i) * H + h) * D];  // [rows, H, D]
                for (int t = 0; t < ctx; ++t) {
                    if (p[t] == 0.0) continue;  // the gate makes many; a zero adds nothing
                    for (int d = 0; d < D; ++d) o[d] += p[t] * v[static_cast<size_t>(t) * D + d];
                }
            }
    });
    return out;
}

template <class Inputs>
std::vector<double> softmax_prefill(const Inputs& in, double scale) {
    return causal_prefill(in, scale, SoftmaxP{});
}

template <class Inputs>
std::vector<double> gated_prefill(const Inputs& in, double scale, const GateParams& g) {
    return causal_prefill(in, scale, GateP(g));
}

// Sliding-window causal prefill (the local attention of Mistral and of Gemma's local layers;
// lesson 06's window exercise): new token i of sequence b sits at position prefix(b) + i and
// attends only to the last `window` positions up to itself,
//
//   prefix + i - window < t <= prefix + i        (window >= 1)
//
// with the softmax over those alone. A window of at least prefix + i + 1 is causal prefill.
struct WindowSoftmaxP {
    long long window;
    std::vector<double> operator()(const std::vector<double>& s) const {
        const long long n = static_cast<long long>(s.size());
        const long long first = n > window ? n - window : 0;  // s holds positions 0 .. n - 1 = prefix + i
        double m = -INFINITY;
        for (long long t = first; t < n; ++t) m = std::max(m, s[t]);
        std::vector<double> p(s.size(), 0.0);
        double sum = 0;
        for (long long t = first; t < n; ++t) sum += (p[t] = std::exp(s[t] - m));
        for (long long t = first; t < n; ++t) p[t] /= sum;
        return p;
    }
};

template <class Inputs>
std::vector<double> sliding_window_prefill(const Inputs& in, double scale, long long window) {
    if (window < 1) {
        std::ostringstream msg;
        msg << "sliding_window_prefill: the window must hold at least 1 position (got " << window << ")";
        throw std::invalid_argument(msg.str());
    }
    return causal_prefill(in, scale, WindowSoftmaxP{window});
}

}  // namespace pa::reference
