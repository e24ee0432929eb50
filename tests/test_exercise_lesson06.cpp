// Lesson 06's exercise, the parts proven without a GPU: the sliding-window prefill reference
// (reference/prefill_reference.h) against a direct computation, and the fill-in's host-side
// layout check (exercise/harness/layout_check.h): step 3's functions pass, and each known
// mistake is named.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "../lessons/06_wgmma_prefill/exercise/harness/layout_check.h"
#include "dtype.h"
#include "prefill_reference.h"
#include "random.h"

namespace {

// Dense prefill inputs: q [B, new_max, H, D], K and V [B, total_max, Hkv, D], rounded to bf16.
struct Dense {
    int nB = 0, nH = 0, nHkv = 0, nD = 0, new_max = 0, total_max = 0;
    std::vector<int> prefixes, news;
    std::vector<double> qd, kd, vd;
    int B() const { return nB; }
    int H() const { return nH; }
    int Hkv() const { return nHkv; }
    int D() const { return nD; }
    int prefix(int b) const { return prefixes[b]; }
    int new_len(int b) const { return news[b]; }
    size_t q_at(int b, int i, int h, int d) const { return ((static_cast<size_t>(b) * new_max + i) * nH + h) * nD + d; }
    size_t kv_at(int b, int t, int h, int d) const { return ((static_cast<size_t>(b) * total_max + t) * nHkv + h) * nD + d; }
    double q(int b, int i, int h, int d) const { return qd[q_at(b, i, h, d)]; }
    double k(int b, int t, int h, int d) const { return kd[kv_at(b, t, h, d)]; }
    double v(int b, int t, int h, int d) const { return vd[kv_at(b, t, h, d)]; }
};

Dense make_dense(int H, int Hkv, int D, std::vector<int> prefixes, std::vector<int> news, uint64_t seed) {
    Dense x;
    x.nB = static_cast<int>(news.size());
    x.nH = H;
    x.nHkv = Hkv;
    x.nD = D;
    x.prefixes = std::move(prefixes);
    x.news = std::move(news);
    for (int b = 0; b < x.nB; ++b) {
        x.new_max = std::max(x.new_max, x.news[b]);
        x.total_max = std::max(x.total_max, x.prefixes[b] + x.news[b]);
    }
    pa::Rng rng(seed, 6);
    x.qd.assign(static_cast<size_t>(x.nB) * x.new_max * H * D, NAN);
    x.kd.assign(static_cast<size_t>(x.nB) * x.total_max * Hkv * D, NAN);
    x.vd = x.kd;
    for (int b = 0; b < x.nB; ++b) {
        for (int i = 0; i < x.news[b]; ++i)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d) x.qd[x.q_at(b, i, h, d)] = pa::round_to(pa::DType::bf16, rng.uniform(-6.f, 6.f));
        for (int t = 0; t < x.prefixes[b] + x.news[b]; ++t)
            for (int h = 0; h < Hkv; ++h)
                for (int d = 0; d < D; ++d) {
                    x.kd[x.kv_at(b, t, h, d)] = pa::round_to(pa::DType::bf16, rng.uniform(-1.f, 1.f));
                    x.vd[x.kv_at(b, t, h, d)] = pa::round_to(pa::DType::bf16, rng.uniform(-1.f, 1.f));
                }
    }
    return x;
}

// The window written out row by row: position p = prefix + i sees max(0, p - W + 1) .. p.
std::vector<double> direct_window(const Dense& x, double scale, long long W) {
    std::vector<double> out;
    for (int b = 0; b < x.nB; ++b)
        for (int i = 0; i < x.news[b]; ++i)
            for (int h = 0; h < x.nH; ++h) {
                const int kvh = h / (x.nH / x.nHkv), p = x.prefixes[b] + i;
                const long long first = std::max(0LL, p - W + 1);
                std::vector<double> w;
                double m = -INFINITY, sum = 0;
                for (long long t = first; t <= p; ++t) {
                    double dot = 0;
                    for (int d = 0; d < x.nD; ++d) dot += x.q(b, i, h, d) * x.k(b, static_cast<int>(t), kvh, d);
                    w.push_back(dot * scale);
                    m = std::max(m, dot * scale);
                }
                for (double& s : w) sum += (s = std::exp(s - m));
                for (int d = 0; d < x.nD; ++d) {
                    double o = 0;
                    for (long long t = first; t <= p; ++t) o += w[t - first] / sum * x.v(b, static_cast<int>(t), kvh, d);
                    out.push_back(o);
                }
            }
    return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

}  // namespace

TEST_CASE("sliding-window prefill: the reference matches the window written out, prefixes and GQA", "[exercise]") {
    const Dense x = make_dense(4, 2, 16, {0, 5, 17}, {9, 1, 20}, 61);
    const double scale = 0.25;
    for (long long W : {1LL, 2LL, 7LL, 16LL, 17LL, 18LL, 36LL, 37LL, 1000LL}) {
        INFO("window " << W);
        CHECK(max_abs_diff(pa::reference::sliding_window_prefill(x, scale, W), direct_window(x, scale, W)) < 1e-12);
    }
}

TEST_CASE("sliding-window prefill: a window past every position is causal prefill; W 1 is V of the own position",
          "[exercise]") {
    const Dense x = make_dense(2, 1, 8, {3, 0}, {4, 6}, 62);
    const double scale = 0.35;
    CHECK(max_abs_diff(pa::reference::sliding_window_prefill(x, scale, 1 << 30), pa::reference::softmax_prefill(x, scale)) <
          1e-12);
    // the longest position is 3 + 4 - 1 = 6: W 7 already sees everything, W 6 does not
    CHECK(max_abs_diff(pa::reference::sliding_window_prefill(x, scale, 7), pa::reference::softmax_prefill(x, scale)) < 1e-12);
    CHECK(max_abs_diff(pa::reference::sliding_window_prefill(x, scale, 6), pa::reference::softmax_prefill(x, scale)) > 1e-3);
    const std::vector<double> one = pa::reference::sliding_window_prefill(x, scale, 1);
    size_t k = 0;
    for (int b = 0; b < x.nB; ++b)
        for (int i = 0; i < x.news[b]; ++i)
            for (int h = 0; h < x.nH; ++h)
                for (int d = 0; d < x.nD; ++d) CHECK(one[k++] == x.v(b, x.prefixes[b] + i, 0, d));
    CHECK_THROWS_WITH(pa::reference::sliding_window_prefill(x, scale, 0),
                      Catch::Matchers::ContainsSubstring("at least 1 position"));
}

TEST_CASE("lesson 06 fill-in layout check: step 3's functions pass, each known mistake is named", "[exercise]") {
    using namespace lesson06_exercise;
    const CoreOffsetFn core = lesson_core_offset;
    const SmemDescFn desc = lesson_desc;
    CHECK(fill_layout_errors(core, desc).empty());
    // the copies of step 3 number 16-byte piece i at byte 16 i
    for (int i = 0; i < 2048; ++i) CHECK(lesson_core_offset((i / 128) * 8 + i % 8, ((i / 8) % 16) * 8) == 16 * i);

    const CoreOffsetFn row_major = [](int row, int d) { return (row * 128 + d) * 2; };
    std::vector<std::string> e = fill_layout_errors(row_major, desc);
    REQUIRE(e.size() == 1);
    CHECK_THAT(e[0], Catch::Matchers::ContainsSubstring("core_offset_bytes lays the tile out row-major"));

    const SmemDescFn swapped = [](uint32_t a, uint32_t lbo, uint32_t sbo) { return lesson_desc(a, sbo, lbo); };
    e = fill_layout_errors(core, swapped);
    REQUIRE(e.size() == 1);
    CHECK_THAT(e[0], Catch::Matchers::ContainsSubstring("LBO and SBO are swapped"));

    const SmemDescFn unshifted = [](uint32_t a, uint32_t lbo, uint32_t sbo) {
        return (lesson_desc(a, lbo, sbo) & ~uint64_t{0x3FFF}) | (a & 0x3FFF);
    };
    e = fill_layout_errors(core, unshifted);
    REQUIRE(e.size() == 1);
    CHECK_THAT(e[0], Catch::Matchers::ContainsSubstring("the start address is not shifted right by 4"));

    // the untouched skeleton: both functions return 0, each fails with the first wrong value
    e = fill_layout_errors([](int, int) { return 0; }, [](uint32_t, uint32_t, uint32_t) { return uint64_t{0}; });
    REQUIRE(e.size() == 2);
    CHECK_THAT(e[0], Catch::Matchers::ContainsSubstring("core_offset_bytes(0, 1) = 0 bytes, expected 2"));
    CHECK_THAT(e[1], Catch::Matchers::ContainsSubstring("smem_desc(0x00000, LBO 128, SBO 2048) = 0x0000000000000000"));
}
