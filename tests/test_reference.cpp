// The CPU reference (pa::reference::softmax_decode) against an attention written here
// from scratch over dense, unpaged arrays. The test builds the dense K/V itself, scatters
// them into a paged cache through a random block table (NaN everywhere else), and checks
// that the reference reading the pages agrees with the dense computation.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "decode_reference.h"
#include "dense_inputs.h"
#include "dtype.h"
#include "paged_cache.h"
#include "random.h"

namespace {

using pa::testing::DenseDecode;
using pa::testing::blank_dense;
using pa::testing::max_rel_diff;

DenseDecode make_dense(int H, int Hkv, int D, std::vector<int> lens, pa::DType t, uint64_t seed) {
    DenseDecode x = blank_dense(H, Hkv, D, std::move(lens), t);
    pa::Rng rng(seed, 77);
    for (auto& e : x.qd) e = pa::round_to(t, rng.uniform(-3.f, 3.f));
    for (int b = 0; b < x.nB; ++b)
        for (int tok = 0; tok < x.lens[b]; ++tok)
            for (int h = 0; h < Hkv; ++h)
                for (int d = 0; d < D; ++d) {
                    x.kd[x.kv_at(b, tok, h, d)] = pa::round_to(t, rng.uniform(-1.f, 1.f));
                    x.vd[x.kv_at(b, tok, h, d)] = pa::round_to(t, rng.uniform(-1.f, 1.f));
                }
    return x;
}

// Scatter the dense arrays into the repository's paged layout through a random block table.
pa::DecodeProblem to_paged(const DenseDecode& x, int block_size, uint64_t seed) {
    pa::DecodeProblem p;
    pa::DecodeShape& s = p.shape;
    s.name = "dense-scatter";
    s.B = x.nB;
    s.H = x.nH;
    s.Hkv = x.nHkv;
    s.D = x.nD;
    s.block_size = block_size;
    s.dtype = x.dtype;
    s.ctx = x.lens;
    p.seed = seed;
    p.scale = 1.0 / std::sqrt(static_cast<double>(x.nD));
    p.table = pa::build_block_table(x.lens, block_size, 3, seed);
    pa::PagedKvCache& c = p.cache;
    c.dtype = x.dtype;
    c.num_blocks = p.table.num_blocks;
    c.Hkv = x.nHkv;
    c.block_size = block_size;
    c.D = x.nD;
    // [num_blocks, Hkv, block_size, D], NaN where no sequence's token lives
    c.k.assign(static_cast<size_t>(c.num_blocks) * x.nHkv * block_size * x.nD, pa::kNaNBits);
    c.v = c.k;
    for (int b = 0; b < x.nB; ++b)
        for (int tok = 0; tok < x.lens[b]; ++tok) {
            const int block = p.table.table[static_cast<size_t>(b) * p.table.max_blocks_per_seq + tok / block_size];
            for (int h = 0; h < x.nHkv; ++h)
                for (int d = 0; d < x.nD; ++d) {
                    const size_t at = ((static_cast<size_t>(block) * x.nHkv + h) * block_size + tok % block_size) * x.nD + d;
                    c.k[at] = pa::encode(x.dtype, static_cast<float>(x.k(b, tok, h, d)));
                    c.v[at] = pa::encode(x.dtype, static_cast<float>(x.v(b, tok, h, d)));
                }
        }
    p.q.resize(x.qd.size());
    for (size_t i = 0; i < x.qd.size(); ++i) p.q[i] = pa::encode(x.dtype, static_cast<float>(x.qd[i]));
    return p;
}

// Attention written out directly, in long double: out = sum_t e^(s_t - m) v_t / sum_t e^(s_t - m).
std::vector<double> dense_attention(const DenseDecode& x) {
    const long double scale = 1.0L / std::sqrt(static_cast<long double>(x.nD));
    const int group = x.nH / x.nHkv;
    std::vector<double> out(static_cast<size_t>(x.nB) * x.nH * x.nD);
    for (int b = 0; b < x.nB; ++b)
        for (int h = 0; h < x.nH; ++h) {
            const int kvh = h / group;
            std::vector<long double> s(x.lens[b]);
            long double m = -INFINITY;
            for (int tok = 0; tok < x.lens[b]; ++tok) {
                long double dot = 0;
                for (int d = 0; d < x.nD; ++d) dot += static_cast<long double>(x.q(b, h, d)) * x.k(b, tok, kvh, d);
                s[tok] = dot * scale;
                m = std::max(m, s[tok]);
            }
            for (int d = 0; d < x.nD; ++d) {
                long double num = 0, den = 0;
                for (int tok = 0; tok < x.lens[b]; ++tok) {
                    const long double e = std::exp(s[tok] - m);
                    num += e * x.v(b, tok, kvh, d);
                    den += e;
                }
                out[(static_cast<size_t>(b) * x.nH + h) * x.nD + d] = static_cast<double>(num / den);
            }
        }
    return out;
}


struct RefCase {
    const char* what;
    int H, Hkv, D, block_size;
    std::vector<int> lens;
    pa::DType dtype;
};

}  // namespace

TEST_CASE("reference softmax_decode on a paged cache matches dense unpaged attention", "[cpu][reference]") {
    const std::vector<RefCase> cases = {
        {"ctx 1, MHA", 1, 1, 64, 16, {1}, pa::DType::fp16},
        {"mixed lengths, group 1", 4, 4, 64, 16, {1, 17, 40}, pa::DType::fp16},
        {"mixed lengths, group 2, page 8", 4, 2, 64, 8, {9, 8, 7, 1}, pa::DType::bf16},
        {"group 4, page 16 boundary", 8, 2, 64, 16, {15, 16, 33}, pa::DType::fp16},
        {"MQA, group 4, page 32", 4, 1, 64, 32, {100, 31, 64}, pa::DType::bf16},
        {"D 128, group 2", 4, 2, 128, 16, {50, 3}, pa::DType::fp16},
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        const RefCase& c = cases[i];
        DYNAMIC_SECTION(c.what) {
            const DenseDecode x = make_dense(c.H, c.Hkv, c.D, c.lens, c.dtype, 1000 + i);
            const pa::DecodeProblem p = to_paged(x, c.block_size, 2000 + i);
            const std::vector<double> expect = dense_attention(x);
            const std::vector<double> paged = pa::reference::softmax_decode(p);
            CHECK(max_rel_diff(paged, expect) < 1e-12);
            // the reference is layout-agnostic: on the dense accessors it gives the same numbers
            const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
            CHECK(max_rel_diff(pa::reference::softmax_decode(x, scale), expect) < 1e-12);
            CHECK(pa::reference::softmax_decode(x, scale) == paged);
        }
    }
}

TEST_CASE("reference softmax weights sum to one: constant V gives that constant", "[cpu][reference]") {
    DenseDecode x = make_dense(8, 2, 64, {1, 13, 70}, pa::DType::fp16, 7);
    // V[b, t, h, d] = c(h, d), exactly representable; K stays random
    for (int b = 0; b < x.nB; ++b)
        for (int t = 0; t < x.lens[b]; ++t)
            for (int h = 0; h < x.nHkv; ++h)
                for (int d = 0; d < x.nD; ++d) x.vd[x.kv_at(b, t, h, d)] = 0.25 * (h + 1) - d / 32.0;
    const std::vector<double> out = pa::reference::softmax_decode(to_paged(x, 16, 8));
    for (int b = 0; b < x.nB; ++b)
        for (int h = 0; h < x.nH; ++h)
            for (int d = 0; d < x.nD; ++d) {
                const double want = 0.25 * (h / 4 + 1) - d / 32.0;
                CHECK(std::fabs(out[(static_cast<size_t>(b) * x.nH + h) * x.nD + d] - want) < 1e-12);
            }
}

TEST_CASE("reference with equal keys averages V, and with one token returns that token's V", "[cpu][reference]") {
    DenseDecode x = make_dense(2, 1, 64, {1, 24}, pa::DType::bf16, 11);
    for (int t = 0; t < x.lens[1]; ++t)
        for (int d = 0; d < x.nD; ++d) x.kd[x.kv_at(1, t, 0, d)] = x.kd[x.kv_at(1, 0, 0, d)];  // every key the same
    const std::vector<double> out = pa::reference::softmax_decode(to_paged(x, 8, 12));
    for (int h = 0; h < 2; ++h)
        for (int d = 0; d < x.nD; ++d) {
            // sequence 0: softmax of one logit is 1
            CHECK(std::fabs(out[static_cast<size_t>(h) * x.nD + d] - x.v(0, 0, 0, d)) < 1e-12);
            double mean = 0;
            for (int t = 0; t < x.lens[1]; ++t) mean += x.v(1, t, 0, d);
            mean /= x.lens[1];
            CHECK(std::fabs(out[(static_cast<size_t>(1) * 2 + h) * x.nD + d] - mean) < 1e-12);
        }
}

TEST_CASE("reference on a generated problem never reads the NaN slots", "[cpu][reference]") {
    const pa::DecodeShape s = pa::make_shape("nan-guard", 4, 2, {1, 17, 31}, 64, 16);
    const pa::DecodeProblem p = pa::make_decode_problem(s, 5);
    for (double o : pa::reference::softmax_decode(p)) REQUIRE(std::isfinite(o));
}
