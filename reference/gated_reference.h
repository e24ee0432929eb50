// CPU reference for the gated decode of lessons 05-06 (the "FIR gate"), in double, from the
// already-rounded inputs. For query head h of sequence b, over positions t = 0 .. ctx-1:
//
//   s_t = scale * q[b, h, :] . k[b, t, h / group, :]
//   r_t = max(s_t, 0)
//   a_t = (r_t + r_{t-1} + r_{t-2}) / FIR_K          FIR_K = 3; r before position 0 is 0
//   p_t = gamma * clamp(r_t - sigma * a_t, 0, 1)
//   out[b, h, :] = sum_t p_t * v[b, t, h / group, :]   no normalisation
//
// Many p_t are exactly 0 (about half at sigma 0, more as sigma grows): lesson 05 skips their
// V rows. Nothing is normalised, so split-k partials simply add, as long as each split
// computes the FIR_K - 1 scores to its left (gated_partial).
//
// Same `Inputs` as decode_reference.h (logical accessors, no layout):
//   B() H() Hkv() D() ctx(seq) q(seq, head, d) k(seq, token, kv_head, d) v(...)
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "decode_reference.h"
#include "paged_cache.h"
#include "parallel.h"

namespace pa::reference {

// Taps of the moving average: p_t depends on r_t and the FIR_K - 1 scores before it.
constexpr int FIR_K = 3;

struct GateParams {
    double gamma = 1.0;  // scales every weight; > 0
    double sigma = 0.0;  // sparsity knob, 0 <= sigma < FIR_K
};

// Refuses a gate the lessons cannot mean. At sigma >= FIR_K, r_t - sigma * a_t <= r_t (1 - sigma / FIR_K)
// <= 0, so every weight is 0; a negative sigma raises weights above the ReLU.
inline void validate_gate(const GateParams& g) {
    if (!(g.sigma >= 0.0 && g.sigma < FIR_K)) {
        std::ostringstream msg;
        msg << "gated attention: sigma must be in [0, " << FIR_K << ") (got " << g.sigma
            << "); at sigma >= " << FIR_K << " every weight is 0";
        throw std::invalid_argument(msg.str());
    }
    if (!(std::isfinite(g.gamma) && g.gamma > 0.0)) {
        std::ostringstream msg;
        msg << "gated attention: gamma must be finite and positive (got " << g.gamma
            << "); it scales weights that the clamp keeps in [0, 1]";
        throw std::invalid_argument(msg.str());
    }
}

// The score-to-P step on one row of consecutive scaled scores s[0 .. n): p[0 .. n).
// Positions before s[0] count as r = 0, which is exact when s[0] is position 0; a split that
// starts later passes its FIR_K - 1 left scores as s[0 ..] and drops their p.
// A NaN score stays NaN (std::max returns its first argument unless it is less), so a
// reference that read a poisoned slot says so instead of gating it to 0.
inline std::vector<double> gate_weights(const std::vector<double>& s, const GateParams& g) {
    validate_gate(g);
    const int n = static_cast<int>(s.size());
    std::vector<double> r(n), p(n);
    for (int t = 0; t < n; ++t) r[t] = std::max(s[t], 0.0);
    for (int t = 0; t < n; ++t) {
        double sum = 0;  // r_t + r_{t-1} + r_{t-2}, in that order
        for (int j = 0; j < FIR_K && j <= t; ++j) sum += r[t - j];
        const double a = sum / FIR_K;
        p[t] = g.gamma * std::min(std::max(r[t] - g.sigma * a, 0.0), 1.0);
    }
    return p;
}

namespace detail {

// Scaled scores of (seq, head) over positions [begin, end): [end - begin].
template <class Inputs>
std::vector<double> gated_scores(const Inputs& in, double scale, int seq, int head, int begin, int end) {
    const int D = in.D(), kvh = head / (in.H() / in.Hkv());
    std::vector<double> q(D), s(end - begin);
    for (int d = 0; d < D; ++d) q[d] = in.q(seq, head, d);
    for (int t = begin; t < end; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += q[d] * in.k(seq, t, kvh, d);
        s[t - begin] = dot * scale;
    }
    return s;
}

}  // namespace detail

// The gate as a score-to-P step (decode_with_weights, and the prefill's policy). Validated
// here, on the calling thread: a throw inside parallel_for's workers would terminate.
struct GateP {
    explicit GateP(const GateParams& g) : gate(g) { validate_gate(g); }
    GateParams gate;
    std::vector<double> operator()(const std::vector<double>& s) const { return gate_weights(s, gate); }
};

// Returns out as [B, H, D].
template <class Inputs>
std::vector<double> gated_decode(const Inputs& in, double scale, const GateParams& g) {
    return decode_with_weights(in, scale, GateP(g));
}

// The weights p of one (sequence, head): [ctx]. Lesson 05 counts its zeros per query head,
// and per KV row (a V row is skippable only where every head of its group has a zero).
template <class Inputs>
std::vector<double> gated_p(const Inputs& in, double scale, const GateParams& g, int seq, int head) {
    return gate_weights(detail::gated_scores(in, scale, seq, head, 0, in.ctx(seq)), g);
}

// Split-k: the partial output of (sequence, head) over tokens [begin, end): [D]. It reads the
// FIR_K - 1 scores left of `begin` (fewer at the start of the sequence, where r is 0), so
// partials over any split of [0, ctx) add up to the decode, with no rescaling.
template <class Inputs>
std::vector<double> gated_partial(const Inputs& in, double scale, const GateParams& g, int seq, int head, int begin,
                                  int end) {
    validate_gate(g);
    if (!(0 <= begin && begin <= end && end <= in.ctx(seq))) {
        std::ostringstream msg;
        msg << "gated_partial: need 0 <= begin <= end <= ctx (got [" << begin << ", " << end << ") with ctx "
            << in.ctx(seq) << ")";
        throw std::invalid_argument(msg.str());
    }
    const int D = in.D(), kvh = head / (in.H() / in.Hkv());
    const int left = std::max(0, begin - (FIR_K - 1));  // first score the split computes
    const std::vector<double> p = gate_weights(detail::gated_scores(in, scale, seq, head, left, end), g);
    std::vector<double> out(D, 0.0);
    for (int t = begin; t < end; ++t) {  // p of the left context is not this split's to add
        const double w = p[t - left];
        if (w == 0.0) continue;
        for (int d = 0; d < D; ++d) out[d] += w * in.v(seq, t, kvh, d);
    }
    return out;
}

// The reference for a generated paged problem.
inline std::vector<double> gated_decode(const DecodeProblem& p, const GateParams& g) {
    return gated_decode(PagedDecodeView(p), p.scale, g);
}

// Lesson 05's extension exercise (lessons/05_sparse_p/exercise/gate.cuh): the gate with a
// floor. Every weight keeps only its part above a fraction `alpha` of the largest weight the
// gate can give (gamma, where the clamp saturates):
//   p'_t = max(p_t - alpha * gamma, 0)          0 <= alpha < 1
// More weights are exactly 0 than under the gate alone (a token is kept only where
// r_t - sigma * a_t > alpha), and the output stays continuous in the scores (a hard cut,
// p_t >= floor ? p_t : 0, would jump by the floor where rounding moves p_t across it).
// alpha 0 is the gate itself.
inline void validate_floor(double alpha) {
    if (!(alpha >= 0.0 && alpha < 1.0)) {
        std::ostringstream msg;
        msg << "gated attention with a floor: alpha must be in [0, 1) (got " << alpha
            << "); at alpha >= 1 every weight is 0";
        throw std::invalid_argument(msg.str());
    }
}

inline std::vector<double> floor_gate_weights(const std::vector<double>& s, const GateParams& g, double alpha) {
    validate_floor(alpha);
    std::vector<double> p = gate_weights(s, g);
    const double floor = alpha * g.gamma;
    for (double& w : p) w = std::max(w - floor, 0.0);  // a NaN weight stays NaN (std::max keeps its first argument)
    return p;
}

// The floored gate as a score-to-P step; validated on the calling thread (see GateP).
struct FloorGateP {
    FloorGateP(const GateParams& g, double a) : gate(g), alpha(a) {
        validate_gate(g);
        validate_floor(a);
    }
    GateParams gate;
    double alpha;
    std::vector<double> operator()(const std::vector<double>& s) const { return floor_gate_weights(s, gate, alpha); }
};

// Returns out as [B, H, D].
template <class Inputs>
std::vector<double> floor_gated_decode(const Inputs& in, double scale, const GateParams& g, double alpha) {
    return decode_with_weights(in, scale, FloorGateP(g, alpha));
}

inline std::vector<double> floor_gated_decode(const DecodeProblem& p, const GateParams& g, double alpha) {
    return floor_gated_decode(PagedDecodeView(p), p.scale, g, alpha);
}

}  // namespace pa::reference
