// The causal prefill reference (pa::reference::softmax_prefill, gated_prefill) against the
// decode references: new token i of a sequence with a prefix of P cached tokens is a decode
// with ctx = P + i + 1, for softmax and for the gate alike. With P = 0, a prefill of n tokens
// is the n decodes of ctx 1 .. n. Also: causality, the row layout, and the refusals.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "decode_reference.h"
#include "dense_inputs.h"
#include "dtype.h"
#include "gated_reference.h"
#include "prefill_reference.h"
#include "random.h"

namespace {

using pa::testing::max_rel_diff;

using pa::reference::GateParams;

// Dense prefill inputs: q [B, new_max, H, D], K and V [B, total_max, Hkv, D], values rounded to
// the storage dtype, NaN past each sequence's new tokens and past its prefix + new tokens.
struct DensePrefill {
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

DensePrefill make_prefill(int H, int Hkv, int D, std::vector<int> prefixes, std::vector<int> news, pa::DType dt,
                          uint64_t seed) {
    DensePrefill x;
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
    // the ranges common/ fills with: q in [-3, 3), K and V in [-1, 1)
    pa::Rng rng(seed, 5);
    x.qd.assign(static_cast<size_t>(x.nB) * x.new_max * H * D, NAN);
    for (int b = 0; b < x.nB; ++b)
        for (int i = 0; i < x.news[b]; ++i)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d) x.qd[x.q_at(b, i, h, d)] = pa::round_to(dt, rng.uniform(-3.f, 3.f));
    x.kd.assign(static_cast<size_t>(x.nB) * x.total_max * Hkv * D, NAN);
    x.vd = x.kd;
    for (int b = 0; b < x.nB; ++b)
        for (int t = 0; t < x.prefixes[b] + x.news[b]; ++t)
            for (int h = 0; h < Hkv; ++h)
                for (int d = 0; d < D; ++d) {
                    x.kd[x.kv_at(b, t, h, d)] = pa::round_to(dt, rng.uniform(-1.f, 1.f));
                    x.vd[x.kv_at(b, t, h, d)] = pa::round_to(dt, rng.uniform(-1.f, 1.f));
                }
    return x;
}

// Every new token of a prefill as its own decode: decode "sequence" r is new token i of
// sequence b (rows in the prefill's output order) with ctx = prefix(b) + i + 1.
struct PrefillAsDecode {
    const DensePrefill& x;
    std::vector<std::pair<int, int>> rows;  // (b, i)

    explicit PrefillAsDecode(const DensePrefill& p) : x(p) {
        for (int b = 0; b < p.nB; ++b)
            for (int i = 0; i < p.news[b]; ++i) rows.emplace_back(b, i);
    }
    int B() const { return static_cast<int>(rows.size()); }
    int H() const { return x.nH; }
    int Hkv() const { return x.nHkv; }
    int D() const { return x.nD; }
    int ctx(int r) const { return x.prefix(rows[r].first) + rows[r].second + 1; }
    double q(int r, int h, int d) const { return x.q(rows[r].first, rows[r].second, h, d); }
    double k(int r, int t, int h, int d) const { return x.k(rows[r].first, t, h, d); }
    double v(int r, int t, int h, int d) const { return x.v(rows[r].first, t, h, d); }
};


struct Case {
    const char* what;
    int H, Hkv, D;
    std::vector<int> prefixes, news;
    pa::DType dtype;
};

const std::vector<GateParams> kGates = {{1.0, 0.0}, {0.75, 1.0}, {1.0, 1.5}, {2.0, 2.9}};

// The identity: the prefill's rows are the decodes of PrefillAsDecode, for both policies.
void check_prefill_is_decodes(const Case& c, uint64_t seed) {
    const DensePrefill x = make_prefill(c.H, c.Hkv, c.D, c.prefixes, c.news, c.dtype, seed);
    const PrefillAsDecode as_decode(x);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
    const std::vector<double> soft = pa::reference::softmax_prefill(x, scale);
    REQUIRE(soft.size() == static_cast<size_t>(as_decode.B()) * c.H * c.D);
    CHECK(max_rel_diff(soft, pa::reference::softmax_decode(as_decode, scale)) < 1e-12);
    for (const GateParams& g : kGates) {
        INFO("gate: gamma " << g.gamma << ", sigma " << g.sigma);
        CHECK(max_rel_diff(pa::reference::gated_prefill(x, scale, g), pa::reference::gated_decode(as_decode, scale, g)) <
              1e-12);
    }
}

}  // namespace

TEST_CASE("reference prefill with prefix 0: n new tokens are the decodes of ctx 1 .. n", "[cpu][reference][prefill]") {
    const std::vector<Case> cases = {
        {"one token", 1, 1, 64, {0}, {1}, pa::DType::fp16},
        {"n 40, group 1", 2, 2, 64, {0}, {40}, pa::DType::fp16},
        {"n 1..33 mixed, group 2", 4, 2, 64, {0, 0, 0, 0, 0}, {1, 2, 3, 16, 33}, pa::DType::bf16},
        {"n 17 and 70, group 8, D 128", 8, 1, 128, {0, 0}, {17, 70}, pa::DType::bf16},
    };
    for (size_t i = 0; i < cases.size(); ++i) DYNAMIC_SECTION(cases[i].what) { check_prefill_is_decodes(cases[i], 100 + i); }
}

TEST_CASE("reference prefill with prefixes (not multiples of 16) and mixed lengths: each row a decode of ctx prefix + i + 1",
          "[cpu][reference][prefill]") {
    const std::vector<Case> cases = {
        {"group 1", 3, 3, 64, {1, 15, 17}, {5, 1, 16}, pa::DType::fp16},
        {"group 2", 4, 2, 64, {33, 0, 7, 100}, {3, 9, 1, 20}, pa::DType::bf16},
        {"group 8, D 128", 16, 2, 128, {31, 49, 0}, {2, 18, 33}, pa::DType::bf16},
        {"MQA group 8, a decode step in the batch", 8, 1, 64, {250, 1}, {1, 40}, pa::DType::fp16},
    };
    for (size_t i = 0; i < cases.size(); ++i) DYNAMIC_SECTION(cases[i].what) { check_prefill_is_decodes(cases[i], 200 + i); }
}

TEST_CASE("reference prefill output rows: sequences concatenated in order", "[cpu][reference][prefill]") {
    const DensePrefill x = make_prefill(2, 1, 64, {4, 0, 9}, {3, 1, 5}, pa::DType::fp16, 3);
    CHECK(pa::reference::prefill_rows(x) == std::vector<long long>{0, 3, 4, 9});
    CHECK(pa::reference::softmax_prefill(x, 0.125).size() == static_cast<size_t>(9) * 2 * 64);
}

TEST_CASE("reference prefill is causal: a position's K/V reach only the rows at or after it", "[cpu][reference][prefill]") {
    const DensePrefill x = make_prefill(4, 2, 64, {5, 0}, {12, 9}, pa::DType::bf16, 17);
    const double scale = 0.125;
    const GateParams g{1.0, 1.0};
    const std::vector<double> soft = pa::reference::softmax_prefill(x, scale), gate = pa::reference::gated_prefill(x, scale, g);
    const size_t row = static_cast<size_t>(x.nH) * x.nD;  // one output row: [H, D]
    // sequence 0, new token j = 6 (position 11): change its key and value
    const int j = 6, pos = x.prefix(0) + j;
    DensePrefill y = x;
    for (int h = 0; h < x.nHkv; ++h)
        for (int d = 0; d < x.nD; ++d) {
            y.kd[y.kv_at(0, pos, h, d)] = -y.k(0, pos, h, d) + 0.5;
            y.vd[y.kv_at(0, pos, h, d)] = y.v(0, pos, h, d) * 2 + 1;
        }
    const std::vector<double> soft2 = pa::reference::softmax_prefill(y, scale), gate2 = pa::reference::gated_prefill(y, scale, g);
    for (int i = 0; i < x.new_len(0); ++i) {
        INFO("sequence 0, new token " << i << ", changed position " << pos);
        const bool same_soft = std::equal(soft.begin() + i * row, soft.begin() + (i + 1) * row, soft2.begin() + i * row);
        const bool same_gate = std::equal(gate.begin() + i * row, gate.begin() + (i + 1) * row, gate2.begin() + i * row);
        CHECK(same_soft == (i < j));  // softmax: every row that sees the position changes
        if (i < j) CHECK(same_gate);
    }
    // the other sequence's rows are untouched
    const size_t first = static_cast<size_t>(x.new_len(0)) * row;
    CHECK(std::equal(soft.begin() + first, soft.end(), soft2.begin() + first));
    CHECK(std::equal(gate.begin() + first, gate.end(), gate2.begin() + first));
}

TEST_CASE("reference prefill refuses impossible inputs by name", "[cpu][reference][prefill]") {
    using Catch::Matchers::ContainsSubstring;
    DensePrefill x = make_prefill(4, 2, 64, {3, 0}, {2, 5}, pa::DType::fp16, 1);
    CHECK_THROWS_WITH(pa::reference::gated_prefill(x, 0.125, {1.0, 3.0}), ContainsSubstring("sigma must be in [0, 3)"));
    CHECK_THROWS_WITH(pa::reference::gated_prefill(x, 0.125, {-1.0, 1.0}), ContainsSubstring("gamma"));
    DensePrefill bad = x;
    bad.prefixes[1] = -1;
    CHECK_THROWS_WITH(pa::reference::softmax_prefill(bad, 0.125), ContainsSubstring("sequence 1 needs prefix >= 0"));
    bad = x;
    bad.news[0] = 0;
    CHECK_THROWS_WITH(pa::reference::softmax_prefill(bad, 0.125), ContainsSubstring("new_len >= 1"));
    bad = x;
    bad.nHkv = 3;
    CHECK_THROWS_WITH(pa::reference::softmax_prefill(bad, 0.125), ContainsSubstring("H must be a multiple of Hkv"));
}
