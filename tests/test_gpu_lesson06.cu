// Lesson 06 (causal prefill: as decode, mma.sync, wgmma, then the pieces of FlashAttention-3 one
// step at a time: the swizzle, TMA, a producer warp, setmaxnreg, the overlap, ping-pong, persistent
// CTAs, the fast 2^x, the next item started early, the lazy rescale, the mask on diagonal tiles
// only, the paired stores, Q in registers, the work list read ahead, the output through the copy
// engine, the gate folded, the max as a tree; softmax and gate) on the GPU, against the
// double-precision reference. Every test is labelled `gpu`. Variants this GPU cannot run (the
// sm_90a steps below Hopper) and those this build does not have (the gate as decode without
// lesson 05) are named in the output (WARN), not run.
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "cuda_check.cuh"
#include "flags.h"
#include "gpu_cases.h"
#include "lesson06.h"
#include "random.h"

namespace {

using namespace lesson06;

constexpr uint64_t kSeed = 20260606;  // printed in the test names: rerun a failure with it

std::vector<PrefillVariant> runnable_here(const pa::DeviceInfo& info) {
    std::vector<PrefillVariant> out;
    for (const auto& v : all_variants()) {
        if (!v.not_built.empty() || info.cc() < v.min_cc) {
            WARN(v.name << " not run: " << (v.not_built.empty() ? "needs " + v.needs : v.not_built));
            continue;
        }
        out.push_back(v);
    }
    return out;
}

// Runs every runnable variant of `policy` (those `only` accepts, when given) on the shape and
// checks it against the full reference. `sharpen` multiplies the score scale. Returns the number
// of (variant) checks made.
int check_all(const PrefillShape& s, Policy policy, const GateSetting& g, uint64_t seed, int copy = 0,
              const std::function<bool(const PrefillVariant&)>& only = {}, double sharpen = 1.0) {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    PrefillProblem p = make_prefill_problem(s, seed);
    p.scale *= sharpen;
    const std::vector<long long> rows = checked_rows(s, 1);
    const std::vector<double> ref = reference_rows(p, policy, g, rows);
    DevicePrefillProblem dev(p, copy + 1);
    int checked = 0;
    for (const auto& v : runnable_here(info)) {
        if (v.policy != policy || (only && !only(v))) continue;
        INFO(v.name << " on " << s.name << " (seed " << seed << ", sigma " << g.sigma << ", copy " << copy << ")");
        REQUIRE(why_not(v, s, info).empty());
        for (int launch_no = 0; launch_no < 2; ++launch_no) {  // a second launch must not depend on the first
            dev.poison_output();
            launch(v, dev.args(g, copy), nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const pa::CheckResult r = pa::compare_output(dev.download_output(), ref, s.dtype);
            INFO("launch " << launch_no << ": rel " << r.rel_err << " " << r.message);
            CHECK(r.pass);
        }
        ++checked;
    }
    return checked;
}

// A random batch: 1..5 sequences of 1..300 new tokens, each with a prefix of 0 or of up to 700
// tokens (mostly not a multiple of 16), KV heads 1..2 and groups 1, 2 or 8.
PrefillShape random_shape(pa::Rng& rng, int index) {
    const int B = 1 + static_cast<int>(rng.below(5));
    const int groups[3] = {1, 2, 8};
    const int group = groups[rng.below(3)], Hkv = 1 + static_cast<int>(rng.below(2));
    std::vector<int> news, prefixes;
    for (int b = 0; b < B; ++b) {
        news.push_back(1 + static_cast<int>(rng.below(300)));
        prefixes.push_back(rng.below(3) == 0 ? 0 : static_cast<int>(rng.below(700)));
    }
    return make_mixed_prefill_shape("random-" + std::to_string(index) + "-B" + std::to_string(B) + "-H" +
                                        std::to_string(group * Hkv) + "-Hkv" + std::to_string(Hkv),
                                    group * Hkv, Hkv, news, prefixes);
}

// Sharp scores: long prompts and a long prefix (many key tiles a row) with the score scale times
// kSharpen, so that a row's max rises by more than 2^8 after its first tile.
constexpr double kSharpen = 16.0;
PrefillShape sharp_shape() { return make_mixed_prefill_shape("sharp", 8, 2, {700, 129, 33}, {0, 1500, 2100}); }

}  // namespace

TEST_CASE("lesson06 every step, softmax and gate, on 16 random mixed batches with prefixes (seed 20260606)",
          "[gpu][lesson06]") {
    pa::Rng rng(kSeed, 6);
    const GateSetting g;  // sigma 1.5: about 72 % of the weights are zero
    int checked = 0;
    for (int i = 0; i < 16; ++i) {
        const PrefillShape s = random_shape(rng, i);
        checked += check_all(s, Policy::softmax, g, kSeed + i);
        checked += check_all(s, Policy::gate, g, kSeed + i);
    }
    CHECK(checked >= 16 * 3);  // mma_sync of both policies and as_decode_softmax run everywhere
}

TEST_CASE("lesson06 steps 4 to 21 by name, softmax and gate, on 12 random batches of odd prompts with prefixes "
          "not multiples of 16 (seed 20260606)",
          "[gpu][lesson06]") {
    // Steps 4 to 21 take step 3 to the last step one idea at a time; each is checked here by name, so
    // a step that drops out of all_variants() fails, and on Hopper every one of them must run.
    auto split_step = [](const PrefillVariant& v) { return v.method >= Method::wgmma_swizzle; };
    std::vector<PrefillVariant> steps;
    for (const auto& v : all_variants())
        if (split_step(v)) steps.push_back(v);
    REQUIRE(steps.size() == 36);  // wgmma_swizzle .. wgmma_v_pages, each with both policies
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    if (!steps[0].not_built.empty()) SKIP(steps[0].not_built);
    if (info.cc() < steps[0].min_cc) SKIP("steps 4 to 21 need " << steps[0].needs << "; this GPU is sm_" << info.cc());

    pa::Rng rng(kSeed, 7);
    const GateSetting g;
    for (int i = 0; i < 12; ++i) {
        // 1..4 sequences of odd lengths 1..299 with prefixes up to 735 that are not multiples of 16:
        // most sequences end inside a page (NaN in its tail), and long prefixes need more K/V tiles
        // than the ring has slots.
        const int B = 1 + static_cast<int>(rng.below(4));
        const int groups[3] = {1, 2, 8};
        const int group = groups[rng.below(3)], Hkv = 1 + static_cast<int>(rng.below(2));
        std::vector<int> news, prefixes;
        for (int b = 0; b < B; ++b) {
            news.push_back(1 + 2 * static_cast<int>(rng.below(150)));
            prefixes.push_back(16 * static_cast<int>(rng.below(46)) + 1 + static_cast<int>(rng.below(15)));
        }
        const PrefillShape s = make_mixed_prefill_shape("odd-" + std::to_string(i) + "-B" + std::to_string(B) + "-H" +
                                                            std::to_string(group * Hkv) + "-Hkv" + std::to_string(Hkv),
                                                        group * Hkv, Hkv, news, prefixes);
        CHECK(check_all(s, Policy::softmax, g, kSeed + 400 + i, 0, split_step) == 18);
        CHECK(check_all(s, Policy::gate, g, kSeed + 400 + i, 0, split_step) == 18);
    }
}

TEST_CASE("lesson06 prompts of 1 .. 300 tokens, prefixes 0 and not multiples of 16, groups 1, 2, 8", "[gpu][lesson06]") {
    const GateSetting g;
    std::vector<PrefillShape> shapes = {
        make_mixed_prefill_shape("one-token", 2, 1, {1}, {0}),
        make_mixed_prefill_shape("page-edges-group1", 4, 4, {15, 16, 17, 127, 128, 129}, {0, 0, 0, 0, 0, 0}),
        make_mixed_prefill_shape("odd-prefixes-group2", 8, 4, {300, 1, 64, 65}, {1, 15, 17, 333}),
        make_mixed_prefill_shape("group8", 16, 2, {255, 256, 257}, {0, 129, 7}),
        make_mixed_prefill_shape("long-prefix", 8, 8, {40}, {2000}),
    };
    for (size_t i = 0; i < shapes.size(); ++i) {
        CHECK(check_all(shapes[i], Policy::softmax, g, kSeed + 100 + i) >= 2);
        CHECK(check_all(shapes[i], Policy::gate, g, kSeed + 100 + i) >= 1);
    }
}

TEST_CASE("lesson06 more work items than SMs: each persistent CTA walks several (mixed lengths and prefixes)",
          "[gpu][lesson06]") {
    // 16 heads x 25 query tiles = 400 (tile, head) items: on a 132-SM GPU every CTA of steps 10
    // to 16 takes three or four, of different lengths, so the ring, its phases and Q's barrier
    // run on across items, and the last tile of an item lands in a slot an earlier item used.
    const PrefillShape s = make_mixed_prefill_shape("persistent-items", 16, 4, {777, 1, 300, 129, 1024, 451},
                                                    {0, 5, 1000, 17, 0, 333});
    const GateSetting g;
    CHECK(check_all(s, Policy::softmax, g, kSeed + 500) >= 2);
    CHECK(check_all(s, Policy::gate, g, kSeed + 500) >= 1);
}

TEST_CASE("lesson06 sharp scores (scale x 16): a row's max rises by more than 2^8 after its first key tile",
          "[gpu][lesson06]") {
    // With the test data's scale a row's max moves by a few units (exp2 domain) after its first
    // tile, which step 13's lazy rescale never acts on; sixteen times the scale spreads the scores
    // over tens of units, so long rows find maxima more than 8 above the one they keep, and the
    // rescale on a jump must be right. Long prompts and a long prefix: many key tiles a row.
    const GateSetting g;
    CHECK(check_all(sharp_shape(), Policy::softmax, g, kSeed + 600, 0, {}, kSharpen) >= 2);
}

TEST_CASE("lesson06 the gate at sparsity 50 % and 87 % (sigma 0 and 2.9), gamma 0.5", "[gpu][lesson06]") {
    const PrefillShape s = make_mixed_prefill_shape("gate-sparsity", 8, 2, {200, 37, 130}, {0, 70, 16});
    for (double sigma : {0.0, 2.9}) {
        GateSetting g;
        g.sigma = sigma;
        g.gamma = 0.5;
        CHECK(check_all(s, Policy::gate, g, kSeed + 200) >= 1);
    }
}

TEST_CASE("lesson06 on the second copy of K/V (the buffers the L2-cold timing rotates through)", "[gpu][lesson06]") {
    const PrefillShape s = make_mixed_prefill_shape("cold-copy", 8, 4, {150, 260}, {33, 0});
    const GateSetting g;
    CHECK(check_all(s, Policy::softmax, g, kSeed + 300, 1) >= 2);
    CHECK(check_all(s, Policy::gate, g, kSeed + 300, 1) >= 1);
}

TEST_CASE("lesson06 refuses shapes it was not built for, by name", "[gpu][lesson06]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    PrefillShape s = make_prefill_shape(2, 64, 8, 4, 0);
    s.D = 64;
    for (const auto& v : all_variants()) {
        if (!v.not_built.empty() || info.cc() < v.min_cc) continue;
        const std::string why = why_not(v, s, info);
        CHECK(why.find("D 128") != std::string::npos);
    }
    CHECK_THROWS_AS(make_prefill_shape(2, 0, 8, 4, 0), pa::FlagError);
    CHECK_THROWS_AS(make_prefill_shape(2, 64, 8, 3, 0), pa::FlagError);
    CHECK_THROWS_AS(parse_prefill_shape("B2-T64-H8"), pa::FlagError);
}

// Two steps whose outputs must be the same bytes (`policy`), on four random batches and on sharp
// scores whose max jumps.
static void check_same_bytes(Method m0, Method m1, Policy policy) {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    std::vector<PrefillVariant> pair;
    for (const auto& v : all_variants())
        if (v.policy == policy && (v.method == m0 || v.method == m1)) pair.push_back(v);
    REQUIRE(pair.size() == 2);
    if (!pair[0].not_built.empty()) SKIP(pair[0].not_built);
    if (info.cc() < pair[0].min_cc) SKIP(pair[0].name << " needs " << pair[0].needs << "; this GPU is sm_" << info.cc());
    pa::Rng rng(kSeed, 9);
    const GateSetting g;
    for (int i = 0; i < 5; ++i) {
        const PrefillShape s = i < 4 ? random_shape(rng, 900 + i) : sharp_shape();
        PrefillProblem p = make_prefill_problem(s, kSeed + 900 + i);
        if (i == 4) p.scale *= kSharpen;
        DevicePrefillProblem dev(p, 1);
        std::vector<std::vector<uint16_t>> outs;
        for (const auto& v : pair) {
            REQUIRE(why_not(v, s, info).empty());
            dev.poison_output();
            launch(v, dev.args(g), nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            outs.push_back(dev.download_output());
        }
        INFO(pair[0].name << " against " << pair[1].name << ", " << s.name);
        CHECK(outs[0] == outs[1]);
    }
}

TEST_CASE("lesson06 step 20's max as a tree gives step 19's softmax output bit for bit (seed 20260606)",
          "[gpu][lesson06]") {
    // fmaxf is exact, so the order in which a row's max is taken cannot change it.
    check_same_bytes(Method::wgmma_folded_gate, Method::wgmma_tree_max, Policy::softmax);
}

TEST_CASE("lesson06 step 21's V pages give step 20's output bit for bit, softmax and gate (seed 20260606)",
          "[gpu][lesson06]") {
    // Only where V lands in shared memory changed: P V adds the same products in the same order.
    check_same_bytes(Method::wgmma_tree_max, Method::wgmma_v_pages, Policy::softmax);
    check_same_bytes(Method::wgmma_tree_max, Method::wgmma_v_pages, Policy::gate);
}
