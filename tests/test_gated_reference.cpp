// The gated decode reference (pa::reference::gated_decode, gated_p, gated_partial) against a
// brute force written here from the definition, the split-k identity (partials over any split
// add up to the decode), exact zeros, the share of zeros on random data, and the refusals.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dense_inputs.h"
#include "dtype.h"
#include "gated_reference.h"
#include "paged_cache.h"
#include "random.h"
#include "shapes.h"

namespace {

using pa::reference::GateParams;

using Dense = pa::testing::DenseDecode;
using pa::testing::max_rel_diff;

using pa::testing::blank_dense;
using pa::testing::copy_dense;

// The gate written out from its definition, in long double, position by position.
struct Brute {
    std::vector<double> out;            // [B, H, D]
    std::vector<std::vector<double>> p;  // [B * H][ctx]
};

Brute brute_gated(const Dense& x, double scale_d, const GateParams& g) {
    const long double scale = scale_d, gamma = g.gamma, sigma = g.sigma;
    const int group = x.nH / x.nHkv;
    Brute res;
    res.out.assign(static_cast<size_t>(x.nB) * x.nH * x.nD, 0.0);
    for (int b = 0; b < x.nB; ++b)
        for (int h = 0; h < x.nH; ++h) {
            const int kvh = h / group, ctx = x.lens[b];
            std::vector<long double> r(ctx);
            for (int t = 0; t < ctx; ++t) {
                long double dot = 0;
                for (int d = 0; d < x.nD; ++d) dot += static_cast<long double>(x.q(b, h, d)) * x.k(b, t, kvh, d);
                r[t] = std::max(dot * scale, 0.0L);
            }
            std::vector<double> p(ctx);
            std::vector<long double> o(x.nD, 0.0L);
            for (int t = 0; t < ctx; ++t) {
                const long double r1 = t >= 1 ? r[t - 1] : 0.0L, r2 = t >= 2 ? r[t - 2] : 0.0L;
                const long double a = (r[t] + r1 + r2) / 3;
                const long double pt = gamma * std::min(std::max(r[t] - sigma * a, 0.0L), 1.0L);
                p[t] = static_cast<double>(pt);
                for (int d = 0; d < x.nD; ++d) o[d] += pt * x.v(b, t, kvh, d);
            }
            for (int d = 0; d < x.nD; ++d) res.out[(static_cast<size_t>(b) * x.nH + h) * x.nD + d] = static_cast<double>(o[d]);
            res.p.push_back(std::move(p));
        }
    return res;
}


std::vector<double> slice(const std::vector<double>& out, const Dense& x, int b, int h) {
    const auto at = out.begin() + static_cast<long>((static_cast<size_t>(b) * x.nH + h) * x.nD);
    return {at, at + x.nD};
}

// Split boundaries to try on a context of `ctx` tokens: one split; every token its own split;
// cuts at 0, 1 and 2 (the left context of the second split is short there); empty splits;
// and a few random cuts. Each list runs 0 = c0 <= c1 <= .. <= cn = ctx.
std::vector<std::vector<int>> splits_of(int ctx, pa::Rng& rng) {
    std::vector<std::vector<int>> all = {{0, ctx}, {0, 0, ctx}, {0, ctx, ctx}};
    std::vector<int> each(ctx + 1);
    for (int t = 0; t <= ctx; ++t) each[t] = t;
    all.push_back(each);
    for (std::vector<int> cuts : std::vector<std::vector<int>>{{1}, {2}, {1, 2}, {2, 3}, {1, 3, 4}}) {
        std::vector<int> s = {0};
        for (int c : cuts) s.push_back(std::min(c, ctx));
        s.push_back(ctx);
        all.push_back(s);
    }
    for (int n = 0; n < 4; ++n) {
        std::vector<int> s = {0, ctx};
        for (int i = 0; i < 1 + n * 2; ++i) s.push_back(static_cast<int>(rng.below(static_cast<uint64_t>(ctx) + 1)));
        std::sort(s.begin(), s.end());
        all.push_back(s);
    }
    return all;
}

// The sum of gated_partial over the splits of `cuts`, for one (sequence, head): [D].
std::vector<double> sum_of_partials(const Dense& x, double scale, const GateParams& g, int b, int h,
                                    const std::vector<int>& cuts) {
    std::vector<double> sum(x.nD, 0.0);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        const std::vector<double> part = pa::reference::gated_partial(x, scale, g, b, h, cuts[i], cuts[i + 1]);
        for (int d = 0; d < x.nD; ++d) sum[d] += part[d];
    }
    return sum;
}

std::string describe(const std::vector<int>& cuts) {
    std::string s;
    for (int c : cuts) s += (s.empty() ? "" : ",") + std::to_string(c);
    return "cuts {" + s + "}";
}

const std::vector<GateParams> kGates = {{1.0, 0.0}, {0.75, 1.0}, {1.0, 1.5}, {2.0, 2.9}};

}  // namespace

TEST_CASE("reference gated_decode on a paged cache matches the gate written out densely", "[cpu][reference][gated]") {
    struct Case {
        const char* what;
        int H, Hkv, D, block_size;
        std::vector<int> lens;
        pa::DType dtype;
    };
    const std::vector<Case> cases = {
        {"ctx 1, MHA", 1, 1, 64, 16, {1}, pa::DType::fp16},
        {"ctx 1..3 and page-crossing, group 1", 4, 4, 64, 16, {1, 2, 3, 17, 40}, pa::DType::fp16},
        {"group 2, page 8", 4, 2, 64, 8, {9, 8, 7, 1}, pa::DType::bf16},
        {"group 4, D 128", 8, 2, 128, 16, {15, 16, 33}, pa::DType::fp16},
        {"MQA, group 8, page 32", 8, 1, 128, 32, {100, 31, 64}, pa::DType::bf16},
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        const pa::DecodeProblem prob =
            pa::make_decode_problem(pa::make_shape(c.what, c.H, c.Hkv, c.lens, c.D, c.block_size, c.dtype), 300 + i);
        const Dense x = copy_dense(pa::PagedDecodeView(prob));
        for (const GateParams& g : kGates)
            DYNAMIC_SECTION(c.what << ", gamma " << g.gamma << ", sigma " << g.sigma) {
                const Brute want = brute_gated(x, prob.scale, g);
                const std::vector<double> paged = pa::reference::gated_decode(prob, g);
                CHECK(max_rel_diff(paged, want.out) < 1e-12);  // also: no NaN slot of the pages was read
                // layout-agnostic: the dense accessors give the same bits
                CHECK(pa::reference::gated_decode(x, prob.scale, g) == paged);
                for (int b = 0; b < x.nB; ++b)
                    for (int h = 0; h < x.nH; ++h)
                        CHECK(max_rel_diff(pa::reference::gated_p(x, prob.scale, g, b, h),
                                           want.p[static_cast<size_t>(b) * x.nH + h]) < 1e-12);
            }
    }
}

TEST_CASE("reference gated split-k: partials over any split add up to the decode, exactly with integer inputs",
          "[cpu][reference][gated]") {
    // Integer q, k a multiple of 3, scale 1/4: every score is a multiple of 3/4, so the FIR sum
    // is one of 3/4 and a = sum / 3 is exact; with sigma 0, 1 or 1.5 and gamma 1/2 every
    // weight is a multiple of 1/16 and every product and sum below is exact in double.
    Dense x = blank_dense(4, 2, 16, {1, 2, 3, 4, 5, 17, 40});
    pa::Rng rng(42, 1);
    auto small_int = [&](int lo, int hi) { return static_cast<double>(lo + static_cast<int>(rng.below(hi - lo + 1))); };
    for (int b = 0; b < x.nB; ++b) {
        for (int h = 0; h < x.nH; ++h)
            for (int d = 0; d < x.nD; ++d) x.qd[x.q_at(b, h, d)] = small_int(-3, 3);
        for (int t = 0; t < x.lens[b]; ++t)
            for (int h = 0; h < x.nHkv; ++h)
                for (int d = 0; d < x.nD; ++d) {
                    x.kd[x.kv_at(b, t, h, d)] = 3 * small_int(-2, 2);
                    x.vd[x.kv_at(b, t, h, d)] = small_int(-4, 4);
                }
    }
    const double scale = 0.25;
    for (const GateParams& g : std::vector<GateParams>{{0.5, 0.0}, {0.5, 1.0}, {0.5, 1.5}}) {
        const std::vector<double> whole = pa::reference::gated_decode(x, scale, g);
        CHECK(whole == brute_gated(x, scale, g).out);  // exact arithmetic: no rounding to differ by
        size_t nonzero = 0;
        for (double o : whole) nonzero += o != 0.0;
        CHECK(nonzero > whole.size() / 2);  // the case is not trivially all zeros
        for (int b = 0; b < x.nB; ++b)
            for (int h = 0; h < x.nH; ++h)
                for (const std::vector<int>& cuts : splits_of(x.lens[b], rng)) {
                    INFO("sigma " << g.sigma << ", sequence " << b << " (ctx " << x.lens[b] << "), head " << h << ", "
                                  << describe(cuts));
                    REQUIRE(sum_of_partials(x, scale, g, b, h, cuts) == slice(whole, x, b, h));
                }
    }
}

TEST_CASE("reference gated split-k on random data: partials add up to the decode to 1e-12", "[cpu][reference][gated]") {
    const pa::DecodeProblem prob = pa::make_decode_problem(
        pa::make_shape("splitk", 8, 2, {1, 2, 3, 7, 100, 300}, 128, 16, pa::DType::bf16), 77);
    const Dense x = copy_dense(pa::PagedDecodeView(prob));
    pa::Rng rng(43, 1);
    for (const GateParams& g : kGates) {
        const std::vector<double> whole = pa::reference::gated_decode(prob, g);
        for (int b = 0; b < x.nB; ++b)
            for (int h = 0; h < x.nH; ++h)
                for (const std::vector<int>& cuts : splits_of(x.lens[b], rng)) {
                    INFO("gamma " << g.gamma << ", sigma " << g.sigma << ", sequence " << b << " (ctx " << x.lens[b]
                                  << "), head " << h << ", " << describe(cuts));
                    const std::vector<double> sum = sum_of_partials(x, prob.scale, g, b, h, cuts);
                    CHECK(max_rel_diff(sum, slice(whole, x, b, h)) < 1e-12);
                    if (cuts.size() == 2) CHECK(sum == slice(whole, x, b, h));  // one split is the decode, bit for bit
                }
    }
}

TEST_CASE("reference gated: a row whose every weight is zero gives exactly 0", "[cpu][reference][gated]") {
    const pa::DecodeProblem prob =
        pa::make_decode_problem(pa::make_shape("zeros", 4, 2, {1, 37, 64}, 64, 16, pa::DType::fp16), 9);
    Dense x = copy_dense(pa::PagedDecodeView(prob));
    // KV head 0 of every sequence: keys with positive entries. Query head 0 negative entries
    // (every score < 0), query head 1 all zero (every score exactly 0): r = 0, so p = 0.
    for (int b = 0; b < x.nB; ++b) {
        for (int t = 0; t < x.lens[b]; ++t)
            for (int d = 0; d < x.nD; ++d) x.kd[x.kv_at(b, t, 0, d)] = std::fabs(x.k(b, t, 0, d)) + 0.125;
        for (int d = 0; d < x.nD; ++d) {
            x.qd[x.q_at(b, 0, d)] = -std::fabs(x.q(b, 0, d)) - 0.25;
            x.qd[x.q_at(b, 1, d)] = 0.0;
        }
    }
    for (const GateParams& g : kGates) {
        const std::vector<double> out = pa::reference::gated_decode(x, prob.scale, g);
        for (int b = 0; b < x.nB; ++b)
            for (int h = 0; h < 2; ++h) {
                INFO("gamma " << g.gamma << ", sigma " << g.sigma << ", sequence " << b << ", head " << h);
                for (double p : pa::reference::gated_p(x, prob.scale, g, b, h)) REQUIRE(p == 0.0);
                for (double o : slice(out, x, b, h)) REQUIRE(o == 0.0);
                for (double o : pa::reference::gated_partial(x, prob.scale, g, b, h, 0, x.lens[b])) REQUIRE(o == 0.0);
            }
        // heads 2 and 3 read the random KV head 1: not all zero
        double norm = 0;
        for (double o : slice(out, x, 2, 2)) norm += o * o;
        CHECK(norm > 0);
    }
}

TEST_CASE("reference gated: share of zeros on random data follows sigma (50 / 64 / 72 / 87 %)",
          "[cpu][reference][gated]") {
    // common/'s fills: q uniform in [-3, 3), K in [-1, 1), scale 1/sqrt(D), so the scores have
    // a standard deviation near 1. Table C's heads: H8 / Hkv4, D 128, bf16.
    const pa::DecodeProblem prob =
        pa::make_decode_problem(pa::make_shape("zero-share", 8, 4, {4096, 4096, 4096, 4096}, 128, 16, pa::DType::bf16), 2024);
    const pa::PagedDecodeView in(prob);
    struct Want {
        double sigma, share;
    };
    for (const Want w : std::vector<Want>{{0.0, 0.50}, {1.0, 0.64}, {1.5, 0.72}, {2.9, 0.87}}) {
        const GateParams g{1.0, w.sigma};
        long long zeros = 0, weights = 0, kv_rows = 0, kv_zero_rows = 0;
        const int group = in.H() / in.Hkv();
        for (int b = 0; b < in.B(); ++b)
            for (int kvh = 0; kvh < in.Hkv(); ++kvh) {
                std::vector<char> all_zero(in.ctx(b), 1);  // a V row no head of the group needs
                for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
                    const std::vector<double> p = pa::reference::gated_p(in, prob.scale, g, b, h);
                    for (int t = 0; t < in.ctx(b); ++t) {
                        zeros += p[t] == 0.0;
                        all_zero[t] &= p[t] == 0.0;
                    }
                    weights += in.ctx(b);
                }
                kv_rows += in.ctx(b);
                kv_zero_rows += std::count(all_zero.begin(), all_zero.end(), 1);
            }
        const double share = static_cast<double>(zeros) / weights;
        const double kv_share = static_cast<double>(kv_zero_rows) / kv_rows;
        INFO("sigma " << w.sigma << ": measured share of zeros " << share << " per query head, " << kv_share
                      << " per KV row (group " << group << "); CURRICULUM.md says about " << w.share);
        CHECK(std::fabs(share - w.share) < 0.02);
        CHECK(kv_share <= share);
    }
}

TEST_CASE("reference gated refuses a sigma below 0 or from 3 on, and a gamma that is not finite and positive",
          "[cpu][reference][gated]") {
    using Catch::Matchers::ContainsSubstring;
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (double sigma : {-0.5, 3.0, 3.5, nan, inf})
        CHECK_THROWS_WITH(pa::reference::validate_gate({1.0, sigma}), ContainsSubstring("sigma must be in [0, 3)"));
    for (double gamma : {0.0, -1.0, nan, inf})
        CHECK_THROWS_WITH(pa::reference::validate_gate({gamma, 1.0}), ContainsSubstring("gamma must be finite and positive"));
    CHECK_NOTHROW(pa::reference::validate_gate({1.0, 0.0}));
    CHECK_NOTHROW(pa::reference::validate_gate({0.5, 2.999}));

    // every entry point refuses before it computes anything
    const pa::DecodeProblem prob = pa::make_decode_problem(pa::make_shape("refuse", 2, 1, {5}, 64, 16), 1);
    const pa::PagedDecodeView in(prob);
    CHECK_THROWS_WITH(pa::reference::gated_decode(prob, {1.0, 3.0}), ContainsSubstring("sigma"));
    CHECK_THROWS_WITH(pa::reference::gated_p(in, prob.scale, {1.0, -1.0}, 0, 0), ContainsSubstring("sigma"));
    CHECK_THROWS_WITH(pa::reference::gated_partial(in, prob.scale, {0.0, 1.0}, 0, 0, 0, 5), ContainsSubstring("gamma"));
    CHECK_THROWS_WITH(pa::reference::gated_partial(in, prob.scale, {1.0, 1.0}, 0, 0, 3, 6),
                      ContainsSubstring("0 <= begin <= end <= ctx"));
    CHECK_THROWS_WITH(pa::reference::gated_partial(in, prob.scale, {1.0, 1.0}, 0, 0, 3, 2),
                      ContainsSubstring("0 <= begin <= end <= ctx"));
}
