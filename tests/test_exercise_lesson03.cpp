// Lesson 03's exercise without a GPU: the log-sum-exp reference (reference/lse_reference.h)
// against a direct computation and against merging two KV segments, the negative-logits case
// (every logit below -88), and the grader's naming of wrong log-sum-exp answers.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <vector>

#include "decode_reference.h"
#include "exercise/harness/host_checks.h"
#include "lse_reference.h"
#include "paged_cache.h"
#include "shapes.h"

namespace {

pa::DecodeProblem problem(std::vector<int> ctx, int D = 64) {
    return pa::make_decode_problem(pa::make_shape("lse-test", 4, 2, std::move(ctx), D, 16, pa::DType::fp16), 7);
}

// log sum_t exp(s_t) written out in long double, with no max subtracted (the scores here are small).
std::vector<double> direct_lse(const pa::DecodeProblem& p) {
    const pa::PagedDecodeView v(p);
    std::vector<double> out;
    for (int b = 0; b < v.B(); ++b)
        for (int h = 0; h < v.H(); ++h) {
            long double sum = 0;
            for (int t = 0; t < v.ctx(b); ++t) {
                long double dot = 0;
                for (int d = 0; d < v.D(); ++d) dot += v.q(b, h, d) * v.k(b, t, h / (v.H() / v.Hkv()), d);
                sum += std::exp(dot * p.scale);
            }
            out.push_back(static_cast<double>(std::log(sum)));
        }
    return out;
}

}  // namespace

TEST_CASE("lse reference equals log sum exp written out", "[exercise][lesson03]") {
    const pa::DecodeProblem p = problem({1, 17, 300});
    const std::vector<double> lse = pa::reference::softmax_lse(p), direct = direct_lse(p);
    REQUIRE(lse.size() == direct.size());
    for (size_t i = 0; i < lse.size(); ++i) CHECK(std::fabs(lse[i] - direct[i]) < 1e-9);
}

TEST_CASE("lse reference: merging two segments gives the whole row", "[exercise][lesson03]") {
    const pa::DecodeProblem p = problem({1, 100, 257});
    const pa::PagedDecodeView v(p);
    const std::vector<double> full = pa::reference::softmax_decode(p), lse = pa::reference::softmax_lse(p);
    for (int b = 0; b < v.B(); ++b)
        for (int h = 0; h < v.H(); ++h)
            for (int cut : {0, 1, v.ctx(b) / 2, v.ctx(b)}) {
                const auto a = pa::reference::segment_attention(v, p.scale, b, h, 0, cut);
                const auto c = pa::reference::segment_attention(v, p.scale, b, h, cut, v.ctx(b));
                const auto m = pa::reference::merge_states(a, c);
                const size_t row = static_cast<size_t>(b) * v.H() + h;
                CHECK(std::fabs(m.lse - lse[row]) < 1e-9);
                for (int d = 0; d < v.D(); ++d) CHECK(std::fabs(m.out[d] - full[row * v.D() + d]) < 1e-9);
            }
}

TEST_CASE("lse reference: an empty segment is -inf and weighs nothing", "[exercise][lesson03]") {
    CHECK(pa::reference::log_sum_exp({}) == -INFINITY);
    CHECK(std::fabs(pa::reference::log_sum_exp({1000.0, 1000.0}) - (1000.0 + std::log(2.0))) < 1e-9);  // no overflow
}

TEST_CASE("negative-logits puts every logit below -88", "[exercise][lesson03]") {
    for (int D : {64, 128}) {
        pa::DecodeProblem p = problem({1, 40, 700}, D);
        lesson03_exercise::make_logits_negative(p);
        const std::vector<double> m = lesson03_exercise::row_max_scores(p);
        for (double x : m) CHECK(x < -88.0);
        // the output is still far from the plain mean of V: the softmax is not flat
        const std::vector<double> ref = pa::reference::softmax_decode(p);
        for (double x : ref) CHECK(std::isfinite(x));
        CHECK(pa::reference::softmax_lse(p)[0] < -88.0);
    }
}

TEST_CASE("the lse check passes the reference and names each wrong answer", "[exercise][lesson03]") {
    const pa::DecodeProblem p = problem({1, 200, 700});
    const int P = 64;  // several partitions, and sentinels for the short sequences
    const std::vector<double> ref = pa::reference::softmax_lse(p);
    std::vector<float> got(ref.begin(), ref.end());
    CHECK(lesson03_exercise::check_lse(got, p, P).empty());

    auto with = [&](auto f) {
        std::vector<float> g(ref.size());
        for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(f(i));
        return lesson03_exercise::check_lse(g, p, P);
    };
    CHECK(with([&](size_t i) { return ref[i] / std::log(2.0); }).find("base 2") != std::string::npos);
    const std::vector<double> m = lesson03_exercise::row_max_scores(p);
    CHECK(with([&](size_t i) { return ref[i] - m[i]; }).find("leaves out the max") != std::string::npos);
    const std::vector<double> last = lesson03_exercise::partition_lse(p, P, 700 / P);
    CHECK(with([&](size_t i) { return last[i]; }).find("grid's last partition") != std::string::npos);
    CHECK(with([&](size_t) { return NAN; }).find("NaN: not written") != std::string::npos);
    CHECK(with([&](size_t i) { return ref[i] + 0.5; }).find("are wrong") != std::string::npos);
}

TEST_CASE("the fill suspect: a reduce one partition short", "[exercise][lesson03]") {
    const pa::DecodeProblem p = problem({100, 200});
    const std::vector<double> cut = lesson03_exercise::decode_without_last_partition(p, 64);  // drops tokens 192..199
    const std::vector<double> full = pa::reference::softmax_decode(p);
    const size_t row1 = static_cast<size_t>(p.shape.H) * p.shape.D;  // sequence 1 starts here
    double diff0 = 0, diff1 = 0;
    for (size_t i = 0; i < row1; ++i) diff0 = std::max(diff0, std::fabs(cut[i] - full[i]));
    for (size_t i = row1; i < full.size(); ++i) diff1 = std::max(diff1, std::fabs(cut[i] - full[i]));
    CHECK(diff0 == 0.0);  // sequence 0 ends before the last partition
    CHECK(diff1 > 1e-3);
}
