// Lesson 05's extension exercise (lessons/05_sparse_p/exercise/gate.cuh), its CPU reference
// without a GPU: floor_gated_decode (reference/gated_reference.h) against a decode written out
// here from the rule, token by token; alpha 0 is the lesson's gate; a token is kept exactly
// where r_t - sigma * a_t > alpha; the floor only adds zeros; invalid floors are refused.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "check.h"
#include "gated_reference.h"
#include "paged_cache.h"
#include "shapes.h"

namespace {

using pa::reference::GateParams;

GateParams gate(double sigma, double gamma) {
    GateParams g;
    g.sigma = sigma;
    g.gamma = gamma;
    return g;
}

// The floored gate decode from its definition, with nothing shared with the reference but the
// logical view of the cache: per (sequence, head), s_t, r_t, a_t, p_t, p'_t, then sum p'_t v_t.
std::vector<double> floor_decode_by_hand(const pa::DecodeProblem& p, const GateParams& g, double alpha) {
    const pa::PagedDecodeView in(p);
    const int B = in.B(), H = in.H(), D = in.D(), group = H / in.Hkv();
    std::vector<double> out(static_cast<size_t>(B) * H * D, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h) {
            const int n = in.ctx(b), kvh = h / group;
            std::vector<double> r(n);
            for (int t = 0; t < n; ++t) {
                double dot = 0;
                for (int d = 0; d < D; ++d) dot += in.q(b, h, d) * in.k(b, t, kvh, d);
                r[t] = std::max(dot * p.scale, 0.0);
            }
            for (int t = 0; t < n; ++t) {
                const double a = (r[t] + (t >= 1 ? r[t - 1] : 0.0) + (t >= 2 ? r[t - 2] : 0.0)) / 3.0;
                const double c = std::min(std::max(r[t] - g.sigma * a, 0.0), 1.0);
                const double w = g.gamma * c - alpha * g.gamma;
                if (w <= 0) continue;  // at or below the floor: not read (the slot may be NaN only past n)
                for (int d = 0; d < D; ++d) out[(static_cast<size_t>(b) * H + h) * D + d] += w * in.v(b, t, kvh, d);
            }
        }
    return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

pa::DecodeProblem problem(uint64_t seed, double q_scale) {
    pa::DecodeProblem p =
        pa::make_decode_problem(pa::make_shape("floor-test", 8, 2, {1, 17, 130, 300}, 128, 16, pa::DType::fp16), seed);
    for (auto& x : p.q) x = pa::encode(p.shape.dtype, static_cast<float>(pa::decode(p.shape.dtype, x) * q_scale));
    return p;
}

}  // namespace

TEST_CASE("lesson 05 exercise: floor_gated_decode matches the rule written out token by token", "[exercise]") {
    const pa::DecodeProblem p = problem(5, 2.0);
    for (const auto& [g, alpha] : {std::pair{gate(0.0, 2.0), 0.25}, std::pair{gate(1.5, 0.5), 0.4},
                                   std::pair{gate(2.9, 1.0), 0.1}, std::pair{gate(0.0, 1.0), 0.9}}) {
        const std::vector<double> ref = pa::reference::floor_gated_decode(p, g, alpha);
        const std::vector<double> hand = floor_decode_by_hand(p, g, alpha);
        INFO("sigma " << g.sigma << " gamma " << g.gamma << " alpha " << alpha);
        REQUIRE(ref.size() == hand.size());
        CHECK(max_abs_diff(ref, hand) < 1e-9);
        for (double x : ref) REQUIRE(std::isfinite(x));  // no NaN slot was read
    }
}

TEST_CASE("lesson 05 exercise: the floor at alpha 0 is the lesson's gate, and a floor changes the output", "[exercise]") {
    const pa::DecodeProblem p = problem(6, 2.0);
    const GateParams g = gate(1.5, 1.0);
    CHECK(pa::reference::floor_gated_decode(p, g, 0.0) == pa::reference::gated_decode(p, g));
    // The grader's inputs: at its gates the floored output is far from the gate's, from zero,
    // and from a floor of alpha that ignores gamma (the tolerance of fp16 is about 1e-2).
    for (const auto& [gg, alpha] : {std::pair{gate(0.0, 2.0), 0.25}, std::pair{gate(1.5, 0.5), 0.4}}) {
        const std::vector<double> ref = pa::reference::floor_gated_decode(p, gg, alpha);
        const std::vector<double> zeros(ref.size(), 0.0);
        std::vector<uint16_t> as_out(ref.size());
        for (size_t i = 0; i < ref.size(); ++i) as_out[i] = pa::encode(pa::DType::fp16, static_cast<float>(ref[i]));
        CHECK(pa::compare_output(as_out, ref, pa::DType::fp16).pass);
        CHECK_FALSE(pa::compare_output(as_out, pa::reference::gated_decode(p, gg), pa::DType::fp16).pass);
        CHECK_FALSE(pa::compare_output(as_out, zeros, pa::DType::fp16).pass);
        CHECK_FALSE(pa::compare_output(as_out, pa::reference::floor_gated_decode(p, gg, alpha / gg.gamma), pa::DType::fp16).pass);
    }
}

TEST_CASE("lesson 05 exercise: a token keeps a weight exactly where r - sigma * a exceeds alpha", "[exercise]") {
    const std::vector<double> s = {-1.0, 0.2, 0.9, 3.0, 0.05, -0.3, 0.7, 2.0, 0.0, 1.2};
    for (const auto& [g, alpha] : {std::pair{gate(0.0, 2.0), 0.25}, std::pair{gate(1.5, 0.5), 0.4}}) {
        const std::vector<double> base = pa::reference::gate_weights(s, g);
        const std::vector<double> w = pa::reference::floor_gate_weights(s, g, alpha);
        int zeros_base = 0, zeros = 0;
        for (size_t t = 0; t < s.size(); ++t) {
            const double r = std::max(s[t], 0.0);
            double sum = 0;
            for (size_t j = 0; j < 3 && j <= t; ++j) sum += std::max(s[t - j], 0.0);
            INFO("t " << t);
            CHECK((w[t] > 0) == (r - g.sigma * sum / 3 > alpha));
            CHECK(w[t] <= base[t]);
            CHECK(w[t] >= 0);
            zeros_base += base[t] == 0;
            zeros += w[t] == 0;
        }
        CHECK(zeros > zeros_base);  // the floor adds zeros: fewer V rows to read
    }
}

TEST_CASE("lesson 05 exercise: the floor's alpha is refused unless 0 <= alpha < 1", "[exercise]") {
    const std::vector<double> s = {0.5, 1.0};
    const GateParams g = gate(0.0, 1.0);
    CHECK_THROWS_AS(pa::reference::floor_gate_weights(s, g, -0.1), std::invalid_argument);
    CHECK_THROWS_AS(pa::reference::floor_gate_weights(s, g, 1.0), std::invalid_argument);
    CHECK_THROWS_AS(pa::reference::floor_gate_weights(s, g, std::nan("")), std::invalid_argument);
    CHECK_NOTHROW(pa::reference::floor_gate_weights(s, g, 0.0));
    CHECK_NOTHROW(pa::reference::floor_gate_weights(s, g, 0.99));
}
