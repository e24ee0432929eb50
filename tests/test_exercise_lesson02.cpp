// Lesson 02's softcap exercise, without a GPU: the soft-capping reference (reference/softcap_reference.h)
// equals a computation written out here by hand, is the plain softmax for cap 0, tends to it as the
// cap grows, and differs from it at the grader's caps on the grader's inputs (so an uncapped kernel
// fails), and the grader's caps change the answer by far more than the tolerance.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "check.h"
#include "decode_reference.h"
#include "dense_inputs.h"
#include "exercise_grader.h"
#include "paged_cache.h"
#include "softcap_reference.h"

namespace {

// One head, D 2, three tokens, written out: s_t = scale * q.k_t, capped, softmax, weighted V.
std::vector<double> by_hand(double cap) {
    const double scale = 0.5;
    const double q[2] = {3, -1};
    const double k[3][2] = {{4, 0}, {-2, 1}, {1, 6}};
    const double v[3][2] = {{1, 10}, {2, 20}, {4, 40}};
    double s[3], w[3], sum = 0;
    for (int t = 0; t < 3; ++t) {
        s[t] = scale * (q[0] * k[t][0] + q[1] * k[t][1]);  // 6, -3.5, -1.5
        if (cap > 0) s[t] = cap * std::tanh(s[t] / cap);
    }
    for (int t = 0; t < 3; ++t) sum += (w[t] = std::exp(s[t]));  // no max: these logits are small
    return {(w[0] * v[0][0] + w[1] * v[1][0] + w[2] * v[2][0]) / sum, (w[0] * v[0][1] + w[1] * v[1][1] + w[2] * v[2][1]) / sum};
}

pa::testing::DenseDecode tiny() {
    pa::testing::DenseDecode x = pa::testing::blank_dense(1, 1, 2, {3});
    x.qd = {3, -1};
    x.kd = {4, 0, -2, 1, 1, 6};
    x.vd = {1, 10, 2, 20, 4, 40};
    return x;
}

}  // namespace

TEST_CASE("softcap reference: equals the computation by hand, and plain softmax for cap 0", "[exercise]") {
    const pa::testing::DenseDecode x = tiny();
    for (double cap : {0.0, 1.0, 2.5, 5.0, 30.0}) {
        INFO("cap " << cap);
        const std::vector<double> ref = pa::reference::softcap_decode(x, 0.5, cap);
        const std::vector<double> hand = by_hand(cap);
        REQUIRE(ref.size() == 2);
        CHECK(std::fabs(ref[0] - hand[0]) < 1e-12);
        CHECK(std::fabs(ref[1] - hand[1]) < 1e-11);
    }
    CHECK(pa::reference::softcap_decode(x, 0.5, 0.0) == pa::reference::softmax_decode(x, 0.5));
    // A cap of 1 squashes the logits 6, -3.5, -1.5 to about 1, -1, -0.9: far from the softmax.
    CHECK(std::fabs(pa::reference::softcap_decode(x, 0.5, 1.0)[0] - pa::reference::softmax_decode(x, 0.5)[0]) > 0.3);
}

TEST_CASE("softcap reference: a large cap tends to the plain softmax", "[exercise]") {
    pa::exercise::GradeCase c;
    c.shape = pa::make_shape("sc", 8, 2, {1, 17, 200}, 64, 16);
    c.q_scale = 8;
    const pa::DecodeProblem p = pa::exercise::make_grade_problem(c, 7);
    const std::vector<double> plain = pa::reference::softmax_decode(p);
    double prev = INFINITY;
    for (double cap : {30.0, 300.0, 3000.0, 30000.0}) {
        const std::vector<double> capped = pa::reference::softcap_decode(p, cap);
        double worst = 0;
        for (size_t i = 0; i < plain.size(); ++i) worst = std::max(worst, std::fabs(capped[i] - plain[i]));
        INFO("cap " << cap << ": " << worst);
        CHECK(worst < prev);
        prev = worst;
    }
    CHECK(prev < 1e-5);
}

TEST_CASE("softcap grading inputs: caps 5 and 30 change the answer by several tolerances", "[exercise]") {
    // The softcap grader scales q by 8 (logits of +-20 and more); an uncapped kernel must fail
    // every case with more than one token at both caps.
    for (auto t : {pa::DType::fp16, pa::DType::bf16}) {
        for (const auto& base : pa::exercise::decode_edge_cases(t, 128)) {
            if (base.name.rfind("ctx-1", 0) == 0) continue;  // one token: its weight is 1 at any cap
            pa::exercise::GradeCase c = base;
            c.q_scale = std::max(c.q_scale, 8.0);
            INFO(c.name);
            const pa::DecodeProblem p = pa::exercise::make_grade_problem(c, 3);
            const std::vector<double> plain = pa::reference::softmax_decode(p);
            std::vector<uint16_t> plain_rounded(plain.size());
            for (size_t i = 0; i < plain.size(); ++i) plain_rounded[i] = pa::encode(t, static_cast<float>(plain[i]));
            for (double cap : {5.0, 30.0}) {
                const pa::CheckResult r = pa::compare_output(plain_rounded, pa::reference::softcap_decode(p, cap), t);
                INFO("cap " << cap << ": " << r.message);
                CHECK_FALSE(r.pass);
                CHECK(r.rel_err > 3 * pa::tolerance_for(t).rel);
            }
        }
    }
}
