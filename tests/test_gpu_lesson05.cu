// Lesson 05 (the gated decode: gate, k_ahead, smem_pages, l2_hints, scores_in_slot,
// bulk_rows, dense, zero_skip, compact_atomic, compact_ordered, split_k_compact,
// split_k_cluster, branchless_gate) on the GPU, against the double-precision gated
// reference. Every test here is labelled `gpu`. The problems hold NaN in every cache slot no
// sequence owns, so a kernel that copies a V row past a sequence's end fails.
// split_k_cluster runs on sm_90 in a build with sm_90 code; elsewhere it must refuse, by
// name, and the tests run the other steps. Steps 7-11 and 13 also run forced onto the 2-slot ring
// (lesson05::small_ring_variants: the layout of GPUs with 99 KiB a CTA), wherever
// every_step runs, so a large GPU checks that layout too.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gather_floor.h"
#include "gpu_cases.h"
#include "lesson05.h"
#include "sparsity.h"
#include "step13_branchless_gate.cuh"  // div3_rn

namespace {

constexpr uint64_t kSeed = 20250505;  // printed in the test names: rerun a failure with it

pa::testing::RandomCaseLimits lesson05_limits() {
    pa::testing::RandomCaseLimits lim;
    lim.max_B = 6;
    lim.max_ctx = 2100;                  // up to 17 tiles: tile ends, page ends and the carry between tiles
    lim.head_sizes = {128};              // the lesson's one head size
    lim.groups = {1, 2, 8, 4, 2};        // 5 entries, coprime with the 3 page sizes: every pair appears
    return lim;
}

pa::testing::RandomCheckOptions gated_options(const lesson05::Gate& gate) {
    pa::testing::RandomCheckOptions o;
    o.reference = [gate](const pa::DecodeProblem& p) { return pa::reference::gated_decode(p, *gate); };
    return o;  // no may_refuse: every case here is one the lesson must run
}

// Whether split_k_cluster runs here: where it does not, it says why, naming sm_90.
bool cluster_step_runs_here(const lesson05::Gate& gate) {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const std::string why =
        lesson05::variant("split_k_cluster", gate).why_not(pa::make_shape("probe", 8, 4, {1000}, 128, 16), info);
    if (!why.empty()) {
        INFO(why);
        CHECK(why.find("sm_90") != std::string::npos);
    }
    return why.empty();
}

// The ladder's steps that run on this GPU and build: every one, less split_k_cluster off sm_90.
std::vector<pa::DecodeVariant> steps_here(const lesson05::Gate& gate) {
    std::vector<pa::DecodeVariant> v = lesson05::variants(gate);
    if (!cluster_step_runs_here(gate))
        v.erase(std::remove_if(v.begin(), v.end(), [](const pa::DecodeVariant& x) { return x.name == "split_k_cluster"; }),
                v.end());
    return v;
}

// A step forced onto the 2-slot ring, found by name among lesson05::small_ring_variants
// (<step>_ring2), so a test never depends on that list's order.
pa::DecodeVariant ring2_of(const std::string& step, const lesson05::Gate& gate) {
    for (const pa::DecodeVariant& v : lesson05::small_ring_variants(gate))
        if (v.name == step + "_ring2") return v;
    throw std::invalid_argument("no 2-slot-ring variant of " + step);
}

// Steps 7-11 and 13 on the 2-slot ring, and split-k there at partitions of 128 tokens.
std::vector<pa::DecodeVariant> ring2_steps(const lesson05::Gate& gate) {
    std::vector<pa::DecodeVariant> v = lesson05::small_ring_variants(gate);
    v.push_back(lesson05::split_k_variant(128, gate, true));
    return v;
}

std::vector<pa::DecodeVariant> every_step(const lesson05::Gate& gate) {
    std::vector<pa::DecodeVariant> v = steps_here(gate);
    v.push_back(lesson05::split_k_variant(128, gate));  // many partitions on every case
    for (const pa::DecodeVariant& r : ring2_steps(gate)) v.push_back(r);
    return v;
}

// One launch; the raw output (dtype bits), after poisoning it.
std::vector<uint16_t> run_once(const pa::DecodeVariant& v, pa::DeviceDecodeProblem& dev) {
    dev.poison_output();
    v.launch(dev.args(), nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    return dev.download_output();
}

// Each of `steps` on shape s against the gated reference, once: every one must run it.
void check_steps_on(const pa::DecodeShape& s, const lesson05::Gate& gate, const std::vector<pa::DecodeVariant>& steps,
                    const std::string& what) {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
    const std::vector<double> ref = pa::reference::gated_decode(p, *gate);
    pa::DeviceDecodeProblem dev(p);
    for (const pa::DecodeVariant& v : steps) {
        INFO(what << " " << s.name << " " << v.name);
        REQUIRE(v.why_not(s, info).empty());
        const pa::CheckResult r = pa::check_once(v, dev, p, ref);
        INFO(r.message);
        CHECK(r.pass);
    }
}

}  // namespace

TEST_CASE("lesson05 every step matches the gated reference on random cases at sigma 0, 1.5, 2.9, gamma 1 and 2.5 "
          "(seed 20250505)",
          "[gpu][lesson05]") {
    int n = 0;
    for (double sigma : {0.0, 1.5, 2.9})
        for (double gamma : {1.0, 2.5}) {
            INFO("sigma " << sigma << ", gamma " << gamma);
            const lesson05::Gate gate = lesson05::make_gate(sigma, gamma);
            std::vector<pa::DecodeVariant> steps = every_step(gate);
            if (cluster_step_runs_here(gate)) steps.push_back(lesson05::split_k_cluster_variant(384, gate));  // up to 6 partitions
            const auto r = pa::testing::check_variants_on_random_cases(steps, kSeed + n++, 15, lesson05_limits(),
                                                                       gated_options(gate));
            CHECK(r.refused == 0);
            CHECK(r.checked == 15 * static_cast<int>(steps.size()));
            CHECK(r.passed == r.checked);
        }
}

TEST_CASE("lesson05 the 2-slot ring (the layout of GPUs with 99 KiB a CTA), forced here: steps 7-11 match the gated "
          "reference on random cases at sigma 0, 1.5, 2.9, groups 1 to 8 (seed 20250505)",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    pa::testing::RandomCaseLimits lim = lesson05_limits();
    lim.groups = {1, 2, 3, 4, 5, 6, 7, 8};  // 8 entries, coprime with the 3 page sizes: every pair in 24 cases
    int n = 0;
    for (double sigma : {0.0, 1.5, 2.9}) {
        INFO("sigma " << sigma);
        const lesson05::Gate gate = lesson05::make_gate(sigma, n == 1 ? 2.5 : 1.0);
        const std::vector<pa::DecodeVariant> steps = ring2_steps(gate);
        // the layout these variants launch: within what a 99 KiB CTA may ask for, whatever this GPU has
        for (const pa::DecodeVariant& v : steps) {
            INFO(v.name);
            const pa::LaunchGeometry g = v.geometry(pa::make_shape("probe", 8, 4, {1000, 3000}, 128, 16), info);
            CHECK(g.smem_bytes + 1024 <= 99 * 1024);
            CHECK(g.smem_bytes > 64 * 1024);  // a 2-slot ring of 34 KiB tiles: not some other kernel's smem
        }
        const auto r = pa::testing::check_variants_on_random_cases(steps, kSeed + 50 + n++, 24, lim, gated_options(gate));
        CHECK(r.refused == 0);
        CHECK(r.checked == 24 * static_cast<int>(steps.size()));
        CHECK(r.passed == r.checked);
    }
}

TEST_CASE("lesson05 the 2-slot ring gives the same bits as the larger layouts (one and two CTAs per SM, two "
          "sequences per CTA) for every step but compact_atomic: the ring changes when a tile is copied, not the sums",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const int lengths[] = {1, 127, 128, 129, 300, 2049, 17, 1000, 256};
    auto batch = [&](int B) {
        std::vector<int> ctx(B);
        for (int i = 0; i < B; ++i) ctx[i] = lengths[i % 9];
        return ctx;
    };
    const lesson05::Gate gate = lesson05::make_gate(1.5, 2.5);
    int k = 0;
    // few CTAs (one per SM), sms + 1 sequences (two per SM), 2 sms + 1 (two sequences per CTA)
    for (const int B : {9, info.sms + 1, 2 * info.sms + 1})
        for (const int group : {1, 3, 8}) {
            const pa::DType t = k % 2 ? pa::DType::fp16 : pa::DType::bf16;
            const pa::DecodeShape s = pa::make_shape("same-bits-B" + std::to_string(B) + "-g" + std::to_string(group),
                                                     2 * group, 2, batch(B), 128, k % 3 == 0 ? 8 : 16, t);
            const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 200 + k++);
            pa::DeviceDecodeProblem dev(p);
            const std::vector<std::pair<pa::DecodeVariant, pa::DecodeVariant>> pairs = {
                {lesson05::variant("dense", gate), ring2_of("dense", gate)},
                {lesson05::variant("zero_skip", gate), ring2_of("zero_skip", gate)},
                {lesson05::variant("compact_ordered", gate), ring2_of("compact_ordered", gate)},
                {lesson05::variant("branchless_gate", gate), ring2_of("branchless_gate", gate)},
                {lesson05::split_k_variant(256, gate), lesson05::split_k_variant(256, gate, true)}};
            for (const auto& [big, ring2] : pairs) {
                INFO(s.name << " " << big.name << " vs " << ring2.name);
                REQUIRE(ring2.name == big.name + "_ring2");
                CHECK(run_once(big, dev) == run_once(ring2, dev));
            }
        }
}

// Steps 1-6, the ones that build up to dense.
const char* const kEarlySteps[] = {"gate", "k_ahead", "smem_pages", "l2_hints", "scores_in_slot", "bulk_rows"};

TEST_CASE("lesson05 steps 1-6 (gate .. bulk_rows) match the gated reference on random cases at sigma 0, 1.5, 2.9, "
          "groups 1 to 8, pages of 8, 16 and 32 (seed 20250505); steps 1-4 run the 2-slot ring",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    pa::testing::RandomCaseLimits lim = lesson05_limits();
    lim.groups = {1, 2, 3, 4, 5, 6, 7, 8};  // 8 entries, coprime with the 3 page sizes: every pair in 24 cases
    int n = 0;
    for (double sigma : {0.0, 1.5, 2.9}) {
        INFO("sigma " << sigma);
        const lesson05::Gate gate = lesson05::make_gate(sigma, n == 1 ? 2.5 : 1.0);
        std::vector<pa::DecodeVariant> steps;
        for (const char* name : kEarlySteps) steps.push_back(lesson05::variant(name, gate));
        for (int i = 0; i < 4; ++i) {  // gate .. l2_hints: the 2-slot ring, whatever this GPU has
            INFO(steps[i].name);
            const pa::LaunchGeometry g = steps[i].geometry(pa::make_shape("probe", 8, 4, {1000, 3000}, 128, 16), info);
            CHECK(g.smem_bytes + 1024 <= 99 * 1024);
            CHECK(g.smem_bytes > 64 * 1024);
        }
        const auto r = pa::testing::check_variants_on_random_cases(steps, kSeed + 70 + n++, 24, lim, gated_options(gate));
        CHECK(r.refused == 0);
        CHECK(r.checked == 24 * static_cast<int>(steps.size()));
        CHECK(r.passed == r.checked);
    }
}

TEST_CASE("lesson05 steps 1-6 give dense's bits (few CTAs, two CTAs per SM, two sequences per CTA for dense): they "
          "change how the tiles are copied, not the sums",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const int lengths[] = {1, 127, 128, 129, 300, 2049, 17, 1000, 256};
    const lesson05::Gate gate = lesson05::make_gate(1.5, 2.5);
    int k = 0;
    for (const int B : {9, info.sms + 1, 2 * info.sms + 1})
        for (const int group : {1, 5, 8}) {
            std::vector<int> ctx(B);
            for (int i = 0; i < B; ++i) ctx[i] = lengths[(i + k) % 9];
            const pa::DType t = k % 2 ? pa::DType::fp16 : pa::DType::bf16;
            const pa::DecodeShape s = pa::make_shape("early-bits-B" + std::to_string(B) + "-g" + std::to_string(group),
                                                     2 * group, 2, ctx, 128, k % 3 == 0 ? 32 : 16, t);
            const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 300 + k++);
            pa::DeviceDecodeProblem dev(p);
            const std::vector<uint16_t> dense = run_once(lesson05::variant("dense", gate), dev);
            for (const char* name : kEarlySteps) {
                INFO(s.name << " " << name << " vs dense");
                CHECK(run_once(lesson05::variant(name, gate), dev) == dense);
            }
        }
}

TEST_CASE("lesson05 a head whose weights are all zero gets exactly 0, and so does a whole sequence", "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    for (pa::DType t : {pa::DType::bf16, pa::DType::fp16}) {
        const pa::DecodeShape s = pa::make_shape("zero-rows", 8, 4, {700, 300, 1}, 128, 16, t);
        pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        // q = 0 gives scores of 0, so r = 0 and p = 0 at every token: head 3 of sequence 0 and
        // every head of sequence 1
        auto zero_q = [&](int seq, int head) {
            for (int d = 0; d < s.D; ++d) p.q[(static_cast<size_t>(seq) * s.H + head) * s.D + d] = pa::encode(t, 0.f);
        };
        zero_q(0, 3);
        for (int h = 0; h < s.H; ++h) zero_q(1, h);
        const lesson05::Gate gate = lesson05::make_gate(1.5, 2.0);
        const std::vector<double> ref = pa::reference::gated_decode(p, *gate);
        pa::DeviceDecodeProblem dev(p);
        for (const pa::DecodeVariant& v : every_step(gate)) {
            INFO(v.name << " " << pa::dtype_name(t));
            REQUIRE(v.why_not(s, info).empty());
            const pa::CheckResult r = pa::check_once(v, dev, p, ref);
            INFO(r.message);
            CHECK(r.pass);
            const std::vector<uint16_t> out = dev.download_output();
            auto exactly_zero = [&](int seq, int head) {
                for (int d = 0; d < s.D; ++d) {
                    const size_t i = (static_cast<size_t>(seq) * s.H + head) * s.D + d;
                    if (ref[i] != 0.0 || pa::decode(t, out[i]) != 0.f) return false;
                }
                return true;
            };
            CHECK(exactly_zero(0, 3));
            for (int h = 0; h < s.H; ++h) CHECK(exactly_zero(1, h));
        }
    }
}

TEST_CASE("lesson05 compact_ordered, split_k_compact and split_k_cluster are bit-identical over 10 runs; "
          "compact_atomic differs from ordered only by the order of its sums",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    for (pa::DType t : {pa::DType::bf16, pa::DType::fp16}) {
        INFO(pa::dtype_name(t));
        const pa::DecodeShape s = pa::make_shape("determinism", 8, 4, {2048, 1999, 1537, 900, 2047, 128, 129, 1500}, 128, 16, t);
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 7);
        const lesson05::Gate gate = lesson05::make_gate(1.5);
        pa::DeviceDecodeProblem dev(p);
        const pa::DecodeVariant ordered = lesson05::variant("compact_ordered", gate);
        const pa::DecodeVariant atomic = lesson05::variant("compact_atomic", gate);
        REQUIRE(ordered.why_not(s, info).empty());
        std::vector<pa::DecodeVariant> deterministic = {ordered, lesson05::variant("split_k_compact", gate),
                                                        lesson05::split_k_variant(256, gate)};
        if (cluster_step_runs_here(gate)) deterministic.push_back(lesson05::variant("split_k_cluster", gate));
        for (const pa::DecodeVariant& v : deterministic) {
            INFO(v.name);
            const std::vector<uint16_t> first = run_once(v, dev);
            for (int run = 1; run < 10; ++run) CHECK(run_once(v, dev) == first);
        }
        // compact_atomic sums the same products as compact_ordered, in the order its atomics
        // landed: a row moves to another 16-row mma step, so the fp32 sums round differently
        // (a few units of the accumulator's last place, ~1e-6 of the sum, a little more where
        // terms cancel), and the output, rounded to 8 (bf16) or 11 (fp16) significant bits, may
        // then land one unit of its last place away. That, and no more, is allowed here.
        const double ulp = t == pa::DType::bf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
        const std::vector<uint16_t> ref_bits = run_once(ordered, dev);
        for (int run = 0; run < 10; ++run) {
            const std::vector<uint16_t> a = run_once(atomic, dev);
            REQUIRE(a.size() == ref_bits.size());
            int off = 0;
            for (size_t i = 0; i < a.size(); ++i) {
                const double x = pa::decode(t, a[i]), y = pa::decode(t, ref_bits[i]);
                if (!(std::fabs(x - y) <= ulp * std::fmax(std::fabs(x), std::fabs(y)) + 1e-4)) ++off;
            }
            INFO("run " << run);
            CHECK(off == 0);
        }
    }
}

// Counts the x in [first, first + n) (as bit patterns) where div3_rn(x) (NAIVE: x times the
// float nearest 1/3, one rounding) is not x / 3.0f, the IEEE division, bit for bit.
template <bool NAIVE>
__global__ void div3_mismatches(unsigned long long* count, unsigned first, unsigned n) {
    unsigned long long local = 0;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float x = __uint_as_float(first + i);
        const float q = NAIVE ? x * (1.f / 3.f) : lesson05::div3_rn(x);
        local += __float_as_uint(q) != __float_as_uint(x / 3.0f);
    }
    if (local) atomicAdd(count, local);
}

unsigned long long count_div3_mismatches(bool naive, unsigned first, unsigned n) {
    pa::DeviceBuffer<unsigned long long> count(1);
    count.fill_bytes(0);
    if (naive)
        div3_mismatches<true><<<1024, 256>>>(count.get(), first, n);
    else
        div3_mismatches<false><<<1024, 256>>>(count.get(), first, n);
    CUDA_CHECK_LAUNCH();
    return count.download()[0];
}

TEST_CASE("lesson05 div3_rn (step 13's gate) equals x / 3.0f bit for bit for every finite x >= 0, denormals "
          "included, and for +inf; one rounding of x * (1/3) does not",
          "[gpu][lesson05]") {
    pa::testing::gpu_for_test();
    CHECK(count_div3_mismatches(false, 0u, 0x7f800000u) == 0);  // 0 .. the largest finite float
    CHECK(count_div3_mismatches(false, 0x7f800000u, 1u) == 0);  // +inf
    CHECK(count_div3_mismatches(true, 0x3f800000u, 1u << 23) > 0);  // [1, 2): the naive product misses some
}

TEST_CASE("lesson05 branchless_gate gives compact_ordered's bits: sigma 0, 1.5 and 2.9, gamma 1 and 2.5, groups 1, "
          "3 and 8, pages of 8, 16 and 32, lengths at and around tile ends, every layout",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const std::vector<int> lengths = {1, 2, 3, 127, 128, 129, 130, 255, 257, 1000, 2049};
    int k = 0;
    // few CTAs (one per SM), sms + 1 sequences (two per SM), 2 sms + 1 (two sequences per CTA)
    for (const int B : {11, info.sms + 1, 2 * info.sms + 1})
        for (const int group : {1, 3, 8}) {
            std::vector<int> ctx(B);
            for (int i = 0; i < B; ++i) ctx[i] = lengths[(i + k) % lengths.size()];
            const pa::DType t = k % 2 ? pa::DType::fp16 : pa::DType::bf16;
            const int bs = k % 3 == 0 ? 8 : k % 3 == 1 ? 16 : 32;
            const pa::DecodeShape s = pa::make_shape("branchless-B" + std::to_string(B) + "-g" + std::to_string(group),
                                                     2 * group, 2, ctx, 128, bs, t);
            const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 300 + k++);
            pa::DeviceDecodeProblem dev(p);
            for (const double sigma : {0.0, 1.5, 2.9})
                for (const double gamma : {1.0, 2.5}) {
                    const lesson05::Gate gate = lesson05::make_gate(sigma, gamma);
                    INFO(s.name << " sigma " << sigma << " gamma " << gamma);
                    const pa::DecodeVariant ordered = lesson05::variant("compact_ordered", gate);
                    const pa::DecodeVariant branchless = lesson05::variant("branchless_gate", gate);
                    REQUIRE(branchless.why_not(s, info).empty());
                    CHECK(run_once(branchless, dev) == run_once(ordered, dev));
                    CHECK(run_once(ring2_of("branchless_gate", gate), dev) ==
                          run_once(ring2_of("compact_ordered", gate), dev));
                }
        }
}

TEST_CASE("lesson05 split_k_compact at partitions of 128, 256 and 512 over mixed lengths, launched twice (the merge "
          "counters reset), every page size",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    std::vector<int> mixed;
    for (int i = 0; i < 10; ++i) mixed.push_back(1 + (i * 1999) % 4000);  // 1 .. 3999: partitions past short ends
    int k = 0;
    for (int bs : {8, 16, 32})
        for (int group : {1, 2, 8})
            for (double sigma : {0.0, 2.9}) {
                const pa::DType t = k % 2 ? pa::DType::fp16 : pa::DType::bf16;
                const pa::DecodeShape s = pa::make_shape("mixed-bs" + std::to_string(bs) + "-g" + std::to_string(group), 2 * group,
                                                         2, mixed, 128, bs, t);
                const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + k++);
                const lesson05::Gate gate = lesson05::make_gate(sigma);
                const std::vector<double> ref = pa::reference::gated_decode(p, *gate);
                pa::DeviceDecodeProblem dev(p);
                for (int P : {128, 256, 512}) {
                    const pa::DecodeVariant v = lesson05::split_k_variant(P, gate);
                    REQUIRE(v.why_not(s, info).empty());
                    for (int launch = 0; launch < 2; ++launch) {
                        INFO(s.name << " " << pa::dtype_name(t) << " sigma " << sigma << " P " << P << " launch " << launch);
                        const pa::CheckResult r = pa::check_once(v, dev, p, ref);
                        INFO(r.message);
                        CHECK(r.pass);
                    }
                }
            }
}

TEST_CASE("lesson05 split_k_cluster: the same bits as split_k_compact at the same partitions (2 to 16 of them, "
          "partitions past short ends), every page size, launched twice",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    if (!cluster_step_runs_here(lesson05::make_gate(0.0))) {
        WARN("split_k_cluster not run: it needs sm_90 code on an sm_90 GPU");
        return;
    }
    std::vector<int> mixed;
    for (int i = 0; i < 10; ++i) mixed.push_back(1 + (i * 1999) % 4000);  // 1 .. 3999
    int k = 0;
    for (int bs : {8, 16, 32})
        for (int group : {1, 8})
            for (double sigma : {0.0, 2.9}) {
                const pa::DType t = k % 2 ? pa::DType::fp16 : pa::DType::bf16;
                const pa::DecodeShape s = pa::make_shape("cluster-bs" + std::to_string(bs) + "-g" + std::to_string(group),
                                                         2 * group, 2, mixed, 128, bs, t);
                const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 100 + k++);
                const lesson05::Gate gate = lesson05::make_gate(sigma, 2.5);
                const std::vector<double> ref = pa::reference::gated_decode(p, *gate);
                pa::DeviceDecodeProblem dev(p);
                for (int P : {256, 512, 2048}) {  // 16, 8 and 2 partitions of the longest sequence
                    const pa::DecodeVariant cluster = lesson05::split_k_cluster_variant(P, gate);
                    INFO(s.name << " " << pa::dtype_name(t) << " sigma " << sigma << " P " << P);
                    REQUIRE(cluster.why_not(s, info).empty());
                    const std::vector<uint16_t> global_merge = run_once(lesson05::split_k_variant(P, gate), dev);
                    for (int launch = 0; launch < 2; ++launch) {
                        const pa::CheckResult r = pa::check_once(cluster, dev, p, ref);
                        INFO(r.message);
                        CHECK(r.pass);
                        CHECK(dev.download_output() == global_merge);
                    }
                }
            }
}

TEST_CASE("lesson05 a 20000-token context (157 tiles: the gate's carry crosses every tile boundary)", "[gpu][lesson05]") {
    const lesson05::Gate gate = lesson05::make_gate(1.5);
    check_steps_on(pa::make_shape("ctx20k-g2", 4, 2, {20000, 333}, 128, 16, pa::DType::bf16), gate, every_step(gate),
                   "sigma 1.5");
}

TEST_CASE("lesson05 page ids beyond the shared-memory page array come from the block table: 20000 tokens in pages of "
          "8 (one CTA per SM), 4500 in pages of 8 beside 199 short sequences (two per SM)",
          "[gpu][lesson05]") {
    std::vector<int> many(200);
    for (size_t i = 0; i < many.size(); ++i) many[i] = 1 + static_cast<int>(i * 53 % 400);
    many[7] = 4500;  // 563 pages: more than the 512 of the two-per-SM layout
    const lesson05::Gate gate = lesson05::make_gate(1.5);
    check_steps_on(pa::make_shape("ctx20k-bs8", 4, 2, {20000, 333}, 128, 8, pa::DType::bf16), gate, every_step(gate),
                   "sigma 1.5");
    check_steps_on(pa::make_shape("B200-one-4500-bs8", 4, 2, many, 128, 8, pa::DType::fp16), gate, every_step(gate),
                   "sigma 1.5");
}

TEST_CASE("lesson05 two sequences per CTA: 2 x SMs + 1 short sequences (one CTA left with one), lengths at and "
          "around tiles, every single-pass step",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const int B = 2 * info.sms + 1;
    const int lengths[] = {128, 1, 256, 129, 127, 384, 77, 300};
    std::vector<int> ctx(B);
    for (int i = 0; i < B; ++i) ctx[i] = lengths[i % 8];
    for (const pa::DType t : {pa::DType::bf16, pa::DType::fp16}) {
        const pa::DecodeShape s = pa::make_shape(std::string("two-per-cta-") + pa::dtype_name(t), 4, 2, ctx, 128, 16, t);
        REQUIRE(lesson05::seqs_per_cta_for(s, info.sms) == 2);
        for (const double sigma : {0.0, 2.9}) {
            const lesson05::Gate gate = lesson05::make_gate(sigma, 2.5);
            check_steps_on(s, gate, steps_here(gate), "sigma " + std::to_string(sigma));
        }
    }
}

TEST_CASE("lesson05 two CTAs per SM, one sequence each: lengths at and around 16 tokens and tiles, pages of 16 and 32, "
          "every step",
          "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const int B = info.sms + 1;  // 2 (sms + 1) CTAs: more than the GPU holds at one per SM, too few to pair sequences
    const int lengths[] = {1, 15, 16, 17, 127, 128, 129, 255, 1000};
    std::vector<int> ctx(B);
    for (int i = 0; i < B; ++i) ctx[i] = lengths[i % 9];
    for (const int bs : {16, 32}) {
        const pa::DecodeShape s = pa::make_shape("k-units-bs" + std::to_string(bs), 4, 2, ctx, 128, bs, pa::DType::bf16);
        REQUIRE(lesson05::seqs_per_cta_for(s, info.sms) == 1);
        for (const double sigma : {0.0, 2.9}) {
            const lesson05::Gate gate = lesson05::make_gate(sigma, 2.5);
            check_steps_on(s, gate, steps_here(gate), "sigma " + std::to_string(sigma));
        }
    }
}

TEST_CASE("lesson05 refuses what it cannot run, by name", "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const lesson05::Gate gate = lesson05::make_gate(1.5);
    const pa::DecodeShape g16 = pa::make_decode_shape("g16", 2, 16, 1, 100, pa::DType::bf16);
    const pa::DecodeShape d64 = pa::make_decode_shape("d64", 2, 8, 4, 100, pa::DType::bf16, 64);
    for (const pa::DecodeVariant& v : every_step(gate)) {
        INFO(v.name);
        CHECK(v.why_not(g16, info).find("group 16") != std::string::npos);
        CHECK(v.why_not(d64, info).find("D 64") != std::string::npos);
    }
    CHECK_THROWS(lesson05::make_gate(3.0));
    CHECK_THROWS(lesson05::make_gate(-0.5));
    CHECK_THROWS(lesson05::make_gate(1.0, 0.0));
    CHECK_THROWS(lesson05::split_k_variant(100, gate));
    CHECK_THROWS(lesson05::split_k_cluster_variant(100, gate));
    if (cluster_step_runs_here(gate)) {  // 32 partitions of 128 tokens: more than a cluster holds
        const std::string why =
            lesson05::split_k_cluster_variant(128, gate).why_not(pa::make_shape("long", 8, 4, {4096}, 128, 16), info);
        CHECK(why.find("more than the") != std::string::npos);
    }
}

TEST_CASE("lesson05 host side: zero counts against a brute-force count, the byte model, split-k's partitions",
          "[gpu][lesson05]") {
    const pa::DecodeShape s = pa::make_shape("count", 8, 4, {300, 17, 129}, 128, 8, pa::DType::bf16);
    const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
    const pa::reference::GateParams g{1.0, 1.5};
    const lesson05::Sparsity z = lesson05::measure_sparsity(p, g);
    const pa::PagedDecodeView view(p);
    long long zeros = 0, skippable = 0, row_used_wrong = 0;
    REQUIRE(z.max_ctx == 300);
    REQUIRE(z.row_used.size() == static_cast<size_t>(s.B) * s.Hkv * z.max_ctx);
    for (int seq = 0; seq < s.B; ++seq)
        for (int kvh = 0; kvh < s.Hkv; ++kvh) {
            const auto a = pa::reference::gated_p(view, p.scale, g, seq, 2 * kvh);
            const auto b = pa::reference::gated_p(view, p.scale, g, seq, 2 * kvh + 1);
            const uint8_t* used = z.row_used.data() + (static_cast<size_t>(seq) * s.Hkv + kvh) * z.max_ctx;
            for (int t = 0; t < z.max_ctx; ++t) {
                const bool in = t < static_cast<int>(a.size());
                if (in) {
                    zeros += (a[t] == 0.0) + (b[t] == 0.0);
                    skippable += a[t] == 0.0 && b[t] == 0.0;
                }
                row_used_wrong += used[t] != (in && (a[t] != 0.0 || b[t] != 0.0) ? 1 : 0);  // 0 past the end
            }
        }
    CHECK(row_used_wrong == 0);
    CHECK(z.weights == 8LL * (300 + 17 + 129));
    CHECK(z.zero_weights == zeros);
    CHECK(z.kv_rows == 4LL * (300 + 17 + 129));
    CHECK(z.skippable_rows == skippable);
    CHECK(z.zero_share() > 0.6);  // about 72 % at sigma 1.5 on random data
    CHECK(z.zero_share() < 0.8);
    const long long dense = pa::decode_bytes_needed(s);
    CHECK(lesson05::sparse_bytes_needed(dense, s, z) == dense - skippable * 256);
    // split-k: two CTAs per SM's worth of partitions, in whole tiles of 128 tokens
    CHECK(lesson05::split_partition_size(1, 4, 2048, 132) == 128);    // 16 partitions: as many as there are tiles
    CHECK(lesson05::split_partition_size(8, 4, 2048, 132) == 256);    // 8 partitions of 2 tiles: a grid of 32 CTAs
    CHECK(lesson05::split_partition_size(32, 4, 2048, 132) == 1024);  // 2 partitions: 256 CTAs
    CHECK(lesson05::split_partition_size(32, 4, 1024, 132) == 512);   // 2 partitions of 4 tiles
    CHECK(lesson05::split_partition_size(32, 4, 512, 132) == 512);    // 1: two partitions would have 2 tiles each
    CHECK(lesson05::split_partition_size(64, 4, 1024, 132) == 1024);  // 1: the grid fills the GPU already
    CHECK(lesson05::split_partition_size(128, 4, 512, 132) == 512);
    CHECK(lesson05::split_partition_size(1, 1, 1, 132) == 128);
    // sequences per CTA of the single pass: two when the grid passes a wave of 2 x 132 CTAs
    CHECK(lesson05::seqs_per_cta(128, 4, 512, 16, 132, 512) == 2);   // 512 CTAs -> 256
    CHECK(lesson05::seqs_per_cta(128, 4, 2048, 16, 132, 512) == 2);  // 128 pages: fit 256
    CHECK(lesson05::seqs_per_cta(64, 4, 1024, 16, 132, 512) == 1);   // 256 CTAs: one wave already
    CHECK(lesson05::seqs_per_cta(70, 4, 512, 16, 132, 512) == 1);    // 280 -> 140: too few for a wave
    CHECK(lesson05::seqs_per_cta(128, 4, 8192, 16, 132, 512) == 1);  // 512 pages: more than half the array
    CHECK(lesson05::seqs_per_cta(1, 600, 512, 16, 132, 512) == 1);   // one sequence
    CHECK(lesson05::seqs_per_cta(265, 2, 384, 16, 132, 512) == 2);   // the check's batch: 530 -> 266
}

TEST_CASE("lesson05 gather floor: runs on pages of 8, 16 and 32 and odd lengths; refuses other shapes by name",
          "[gpu][lesson05]") {
    pa::testing::gpu_for_test();
    for (int bs : {8, 16, 32}) {
        const pa::DecodeShape s = pa::make_shape("gather", 8, 4, {300, 17, 129, 1}, 128, bs, pa::DType::bf16);
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        const lesson05::Sparsity z = lesson05::measure_sparsity(p, pa::reference::GateParams{1.0, 2.9});
        const lesson05::GatherFloor f = lesson05::time_gather_floor(p, z.row_used, z.max_ctx);
        CHECK(std::isfinite(f.dense_us));
        CHECK(f.dense_us > 0);
        CHECK(std::isfinite(f.needed_us));
        CHECK(f.needed_us > 0);
    }
    const pa::DecodeShape d64 = pa::make_shape("d64", 8, 4, {64}, 64, 16, pa::DType::bf16);
    const pa::DecodeProblem p64 = pa::make_decode_problem(d64, kSeed);
    CHECK_THROWS_AS(lesson05::time_gather_floor(p64, std::vector<uint8_t>(4 * 64, 1), 64), std::invalid_argument);
    const pa::DecodeShape big_pages = pa::make_shape("bs64", 8, 4, {64}, 128, 64, pa::DType::bf16);
    const pa::DecodeProblem p_big = pa::make_decode_problem(big_pages, kSeed);
    CHECK_THROWS_AS(lesson05::time_gather_floor(p_big, std::vector<uint8_t>(4 * 64, 1), 64), std::invalid_argument);
    const pa::DecodeShape ok = pa::make_shape("ok", 8, 4, {64}, 128, 16, pa::DType::bf16);
    const pa::DecodeProblem p_ok = pa::make_decode_problem(ok, kSeed);
    CHECK_THROWS_AS(lesson05::time_gather_floor(p_ok, std::vector<uint8_t>(3, 1), 64), std::invalid_argument);
}

TEST_CASE("lesson05 two streams at once: split-k's partials and merge counters are the stream's own", "[gpu][lesson05]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    // two batches of the same size (so that even scratch sized per launch would be shared), other
    // lengths; small enough that both streams' CTAs are resident together
    const pa::DecodeShape a = pa::make_shape("streams-a", 8, 4, {3000, 700, 5000, 1}, 128, 16, pa::DType::bf16);
    const pa::DecodeShape b = pa::make_shape("streams-b", 8, 4, {4100, 5000, 90, 2600}, 128, 16, pa::DType::bf16);
    const lesson05::Gate gate = lesson05::make_gate(1.5);
    for (const pa::DecodeVariant& v : {lesson05::variant("split_k_compact", gate), lesson05::split_k_variant(256, gate),
                                        lesson05::variant("compact_ordered", gate)}) {
        REQUIRE(v.why_not(a, info).empty());
        REQUIRE(v.why_not(b, info).empty());
        pa::testing::check_two_streams(v, a, b, kSeed + 11);
    }
}
