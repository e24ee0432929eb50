// Lesson 04's three reduces on the GPU: each behind lesson 03's partition kernel against the
// double-precision reference (every segment count 1..64, 256 and 1024; the post's ctx 513
// at partition 32; mixed lengths whose short sequences leave sentinel partitions; fp16 and
// bf16; NaN in every cache slot no sequence owns), and each alone on synthetic scratch,
// where appending sentinel segments must change no bit of the output. Labelled `gpu`.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "gpu_cases.h"
#include "lesson04.h"
#include "random.h"

using lesson04::Fix;

namespace {

constexpr uint64_t kSeed = 20250404;  // printed in the test names: rerun a failure with it

// Each fix's pipeline at a fixed partition size, on one problem; CHECKs name the fix.
void check_pipelines(const pa::DecodeShape& s, int partition_size, uint64_t seed) {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeProblem p = pa::make_decode_problem(s, seed);
    const std::vector<double> ref = pa::reference::softmax_decode(p);
    pa::DeviceDecodeProblem dev(p);
    for (Fix f : lesson04::all_fixes()) {
        const pa::DecodeVariant v = lesson04::variant(f, partition_size);
        INFO(v.name << " on " << s.name << " (" << pa::dtype_name(s.dtype) << ", block " << s.block_size << ", partition "
                    << partition_size << ", seed " << seed << ")");
        const std::string why = v.why_not(s, info);  // lesson 03's partition kernel and the reduce
        INFO(why);
        REQUIRE(why.empty());
        const pa::CheckResult r = pa::check_once(v, dev, p, ref);
        INFO("rel err " << r.rel_err << ", max abs err " << r.max_abs_err << ": " << r.message);
        CHECK(r.pass);
    }
}

// A context of exactly `segments` partitions whose last one is partly filled.
int ctx_with_segments(int segments, int partition_size, int salt) {
    return partition_size * (segments - 1) + 1 + (salt * 13) % partition_size;
}

// Synthetic scratch for B x H heads: each head's first `real` entries random (m finite,
// l > 0), then sentinels up to `partitions`. Head (b, h) has real_of(b, h) real entries,
// at least one.
struct SyntheticScratch {
    int B, H, D, partitions;
    std::vector<float> m, l, acc;

    SyntheticScratch(int B_, int H_, int D_, int partitions_, const std::vector<int>& real_per_head, uint64_t seed)
        : B(B_), H(H_), D(D_), partitions(partitions_) {
        for (int bh = 0; bh < B * H; ++bh) {
            pa::Rng rng(seed, static_cast<uint64_t>(bh));  // the same values whatever `partitions` is
            for (int s = 0; s < partitions; ++s) {
                const bool real = s < real_per_head[bh];
                m.push_back(real ? rng.uniform(-6.f, 6.f) : -INFINITY);
                l.push_back(real ? rng.uniform(1.f, 64.f) : 0.f);
                for (int d = 0; d < D; ++d) acc.push_back(real ? rng.uniform(-20.f, 20.f) : 0.f);
            }
        }
    }
};

// Runs fix f's reduce alone on synthetic scratch and returns the raw 16-bit outputs.
std::vector<uint16_t> reduce_on(Fix f, const SyntheticScratch& h, pa::DType t) {
    pa::DeviceBuffer<float> m(h.m), l(h.l), acc(h.acc);  // exactly the scratch: memcheck sees any read past it
    pa::DeviceBuffer<uint16_t> out(static_cast<size_t>(h.B) * h.H * h.D);
    out.fill_bytes(0xff);  // poison: an unwritten element reads as NaN
    pa::PagedDecodeArgs a;
    a.out = out.get();
    a.B = h.B;
    a.H = h.H;
    a.D = h.D;
    a.dtype = t;
    lesson03::SplitScratch s;
    s.m = m.get();
    s.l = l.get();
    s.acc = acc.get();
    s.max_partitions = h.partitions;
    lesson04::launch_reduce(f, a, s, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return out.download();
}

}  // namespace

TEST_CASE("lesson04 every segment count 1..64 at partition 32, each reduce against the reference (seed 20250404)",
          "[gpu][lesson04]") {
    const int block_sizes[] = {8, 16, 32};
    for (int segments = 1; segments <= 64; ++segments) {
        // two sequences: one with exactly `segments` partitions, one shorter (sentinel partitions)
        const int ctx = ctx_with_segments(segments, 32, segments);
        const pa::DType t = segments % 2 ? pa::DType::bf16 : pa::DType::fp16;
        const pa::DecodeShape s = pa::make_shape("segments-" + std::to_string(segments), 8, 4, {ctx, 1 + ctx / 3}, 128,
                                                 block_sizes[segments % 3], t);
        REQUIRE(lesson04::segments_for(s.max_ctx(), 32) == segments);
        check_pipelines(s, 32, kSeed + segments);
    }
}

TEST_CASE("lesson04 256 segments (partition 64) and 1024 segments (ctx 128k at partition 128)", "[gpu][lesson04]") {
    const pa::DecodeShape s256 = pa::make_shape("segments-256", 8, 4, {ctx_with_segments(256, 64, 5), 700}, 128, 16,
                                                pa::DType::fp16);
    REQUIRE(lesson04::segments_for(s256.max_ctx(), 64) == 256);
    check_pipelines(s256, 64, kSeed + 256);
    const pa::DecodeShape s1024 = pa::make_shape("ctx128k", 8, 4, {131072}, 128, 16, pa::DType::bf16);
    REQUIRE(lesson04::segments_for(s1024.max_ctx(), 128) == 1024);
    check_pipelines(s1024, 128, kSeed + 1024);
    // the lesson's own choice of partition size lands on the same 1024 segments
    CHECK(lesson04::partition_size_for(s1024) == 128);
}

TEST_CASE("lesson04 the post's case: ctx 513 at partition 32, 17 segments, fp16 and bf16", "[gpu][lesson04]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    REQUIRE(lesson04::segments_for(513, 32) == 17);
    // pad_scratch launches (and allocates) 32 partitions per (sequence, KV head), the others 17
    const pa::DecodeShape post = pa::make_shape("post-ctx513", 8, 4, {513}, 128, 16, pa::DType::bf16);
    CHECK(lesson04::variant(Fix::pad_scratch, 32).geometry(post, info).ctas == 4 * 32);
    CHECK(lesson04::variant(Fix::pow2_lanes, 32).geometry(post, info).ctas == 4 * 17);
    CHECK(lesson04::variant(Fix::loop, 32).geometry(post, info).ctas == 4 * 17);
    for (pa::DType t : {pa::DType::fp16, pa::DType::bf16})
        for (int D : {64, 128, 256})
            check_pipelines(pa::make_shape("post-ctx513-D" + std::to_string(D), 8, 4, {513}, D, 16, t), 32, kSeed + 513);
}

TEST_CASE("lesson04 mixed lengths: short sequences leave sentinel partitions", "[gpu][lesson04]") {
    const std::vector<int> ctx = {1, 31, 32, 33, 513, 1500};
    for (pa::DType t : {pa::DType::fp16, pa::DType::bf16})
        for (int bs : {8, 16, 32})
            for (int ps : {32, 64}) {
                const pa::DecodeShape s = pa::make_shape("mixed-bs" + std::to_string(bs), 16, 2, ctx, 128, bs, t);
                check_pipelines(s, ps, kSeed + bs + ps);
            }
    // and the lesson's own check shapes (the catalogue's awkward ones among them)
    for (const auto& s : lesson04::check_shapes()) check_pipelines(s, lesson04::partition_size_for(s), kSeed);
}

TEST_CASE("lesson04 pad_scratch and pow2_lanes write the same bits behind the same partition kernel", "[gpu][lesson04]") {
    pa::testing::gpu_for_test();
    // B 2 x Hkv 4 partition CTAs per segment: 3 segments (24 / 32 CTAs) stay under any SM count, the
    // others (264+ CTAs) over, so both grids get the same layout of lesson 03's kernel, whose CTA
    // computes its partition alone: the real partitions' states are the same bits in both scratches.
    for (int segments : {3, 33, 100, 513}) {
        const int ctx = ctx_with_segments(segments, 32, 1);
        const pa::DecodeShape s = pa::make_shape("same-bits", 8, 4, {ctx, ctx / 2 + 1}, 128, 16, pa::DType::bf16);
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        pa::DeviceDecodeProblem dev(p);
        std::vector<std::vector<uint16_t>> outs;
        for (Fix f : {Fix::pad_scratch, Fix::pow2_lanes}) {
            lesson04::Scratch scratch;
            dev.poison_output();
            lesson04::launch_pipeline(f, dev.args(), 32, scratch, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            outs.push_back(dev.download_output());
        }
        INFO(segments << " segments (pad_scratch: " << lesson04::next_pow2(segments) << " entries)");
        CHECK(outs[0] == outs[1]);
    }
}

TEST_CASE("lesson04 appended sentinel segments change no bit of any reduce (synthetic scratch)", "[gpu][lesson04]") {
    pa::testing::gpu_for_test();
    int compared = 0;
    for (pa::DType t : {pa::DType::fp16, pa::DType::bf16})
        for (int D : {64, 128, 256})
            for (int real : {1, 2, 5, 17, 31, 32, 33, 100, 513, 1000}) {
                const int B = 2, H = 3;
                // head 0 of each sequence has every real segment, the others fewer (down to one)
                std::vector<int> per_head;
                for (int bh = 0; bh < B * H; ++bh) per_head.push_back(bh % H == 0 ? real : 1 + (7 * bh) % real);
                const int p2 = lesson04::next_pow2(real);
                const auto base = reduce_on(Fix::pow2_lanes, SyntheticScratch(B, H, D, real, per_head, kSeed), t);
                const auto base_loop = reduce_on(Fix::loop, SyntheticScratch(B, H, D, real, per_head, kSeed), t);
                for (int partitions : {real + 1, p2, p2 + 1, 2 * p2, lesson04::kMaxSegments}) {
                    if (partitions > lesson04::kMaxSegments) continue;
                    INFO(pa::dtype_name(t) << " D " << D << ": " << real << " real segments in a scratch of " << partitions);
                    const SyntheticScratch padded(B, H, D, partitions, per_head, kSeed);
                    CHECK(reduce_on(Fix::pow2_lanes, padded, t) == base);
                    CHECK(reduce_on(Fix::loop, padded, t) == base_loop);
                    if (lesson04::next_pow2(partitions) == partitions) CHECK(reduce_on(Fix::pad_scratch, padded, t) == base);
                    ++compared;
                }
            }
    CHECK(compared >= 250);
}

TEST_CASE("lesson04 auto and split_pow2_<P> (lesson 03's plans, pow2_lanes as the reduce) against the reference",
          "[gpu][lesson04]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    std::vector<pa::DecodeShape> shapes = lesson04::check_shapes();
    shapes.push_back(pa::make_shape("g32-head-rows", 32, 1, {4096, 1, 700}, 128, 16, pa::DType::fp16));
    shapes.push_back(pa::make_shape("g8-40k", 64, 8, {40000}, 128, 16, pa::DType::bf16));          // 313 partitions at 128
    shapes.push_back(pa::make_shape("g32-D256", 32, 1, {3000, 17}, 256, 32, pa::DType::fp16));     // head rows refused
    shapes.push_back(pa::make_shape("g1-B1", 32, 32, {1000}, 128, 16, pa::DType::fp16));  // lesson 03 fuses; auto does not
    shapes.push_back(pa::make_shape("g6-B1-ctx128", 12, 2, {128}, 128, 16, pa::DType::fp16));  // one partition (sm_90: units)
    shapes.push_back(pa::make_shape("g6-B1-ctx512", 12, 2, {512}, 128, 16, pa::DType::bf16));  // 128, not lesson 03's 64
    int checked = 0;
    for (const auto& s : shapes) {
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        const std::vector<double> ref = pa::reference::softmax_decode(p);
        pa::DeviceDecodeProblem dev(p);
        for (const auto& v : lesson04::plan_variants()) {
            INFO(v.name << " on " << s.name << " (seed " << kSeed << ")");
            const std::string why = v.why_not(s, info);
            INFO(why);
            if (v.name == "auto") REQUIRE(why.empty());  // auto runs everything lesson 03's auto runs
            if (!why.empty()) continue;
            for (int run = 0; run < 2; ++run) {  // twice: the second reduce starts early behind its partitions
                const pa::CheckResult r = pa::check_once(v, dev, p, ref);
                INFO("run " << run << ": rel err " << r.rel_err << ": " << r.message);
                CHECK(r.pass);
            }
            ++checked;
        }
    }
    CHECK(checked >= 40);
}

TEST_CASE("lesson04 refuses what it did not build, in one line", "[gpu][lesson04]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    // a head size with no instantiation
    CHECK(lesson04::reduce_why_not(Fix::pow2_lanes, 96, 17).find("head size 96") != std::string::npos);
    const SyntheticScratch s96(1, 1, 96, 4, {4}, kSeed);
    CHECK_THROWS_AS(reduce_on(Fix::pow2_lanes, s96, pa::DType::fp16), pa::CudaError);
    CHECK_THROWS_AS(reduce_on(Fix::loop, s96, pa::DType::fp16), pa::CudaError);
    // pad_scratch on a scratch that is not a power of two
    const SyntheticScratch s17(1, 2, 128, 17, {17, 3}, kSeed);
    CHECK_THROWS_AS(reduce_on(Fix::pad_scratch, s17, pa::DType::bf16), pa::CudaError);
    // more segments than the widest reduce
    CHECK(lesson04::reduce_why_not(Fix::loop, 128, 1025).find("1024") != std::string::npos);
    const pa::DecodeShape huge = pa::make_shape("huge", 8, 4, {524289}, 128, 16, pa::DType::bf16);
    for (Fix f : lesson04::all_fixes()) CHECK(lesson04::why_not(f, huge, info).find("1024") != std::string::npos);
}

TEST_CASE("lesson04 two streams at once: each stream's pipeline has its own scratch", "[gpu][lesson04]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    // two batches of the same size (so that even scratch sized per launch would be shared), other
    // lengths; small enough that both streams' CTAs are resident together
    const pa::DecodeShape a = pa::make_shape("streams-a", 8, 2, {3000, 700, 5000, 1}, 128, 16, pa::DType::fp16);
    const pa::DecodeShape b = pa::make_shape("streams-b", 8, 2, {4100, 5000, 90, 2600}, 128, 16, pa::DType::fp16);
    for (const pa::DecodeVariant& v : {lesson04::variant(Fix::pow2_lanes), lesson04::variant(Fix::loop),
                                        lesson04::auto_variant(), lesson04::split_pow2_variant(256)}) {
        REQUIRE(v.why_not(a, info).empty());
        REQUIRE(v.why_not(b, info).empty());
        pa::testing::check_two_streams(v, a, b, kSeed + 11);
    }
}

// Lesson 03's step 1 (the thread-group partitions that fit every sm_80+ GPU, which the
// pipelines run where the mma partition kernel does not fit) writes the scratch every reduce
// here reads: each fix behind it, over its own scratch (pad_scratch's padded, the extra
// entries sentinels), on the post's 17 segments and on mixed lengths.
TEST_CASE("lesson04 every reduce behind lesson 03's step 1 partitions (the 99 KiB GPUs' pipeline)", "[gpu][lesson04]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const std::vector<std::pair<pa::DecodeShape, int>> cases = {
        {pa::make_shape("step1-ctx513-p32", 8, 4, {513}, 128, 16, pa::DType::bf16), 32},
        {pa::make_shape("step1-mixed", 8, 2, {1, 33, 513, 4000, 100}, 64, 8, pa::DType::fp16), 64},
        {pa::make_shape("step1-D256", 4, 4, {3000, 17}, 256, 32, pa::DType::fp16), 128},
    };
    for (const auto& [s, size] : cases) {
        lesson03::SplitPlan plan;
        plan.tgs = lesson03::kStepTgs;
        plan.partition_size = size;
        REQUIRE(lesson03::why_not(plan, s, info).empty());
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        const std::vector<double> ref = pa::reference::softmax_decode(p);
        pa::DeviceDecodeProblem dev(p);
        for (Fix f : lesson04::all_fixes()) {
            INFO(lesson04::fix_name(f) << " behind " << lesson03::plan_name(plan) << " on " << s.name);
            lesson04::Scratch scratch;
            const int parts = lesson04::scratch_partitions(f, lesson04::segments_for(s.max_ctx(), size));
            REQUIRE(lesson04::reduce_why_not(f, s.D, parts).empty());
            const lesson03::SplitScratch sc = scratch.get(s.B, s.H, s.D, parts, nullptr);
            dev.poison_output();
            const pa::PagedDecodeArgs a = dev.args();
            lesson03::launch_partitions(a, plan, sc, nullptr);
            lesson04::launch_reduce(f, a, sc, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const pa::CheckResult r = pa::compare_output(dev.download_output(), ref, s.dtype);
            INFO(r.message);
            CHECK(r.pass);
        }
    }
    // where the mma partition kernel runs, the pipelines keep it (the measured path)
    const pa::DecodeShape s = cases[0].first;
    const lesson03::SplitPlan fast = lesson04::partitions_plan(s, 32, info);
    lesson03::SplitPlan mma;
    mma.partition_size = 32;
    CHECK(fast.tgs == (lesson03::why_not(mma, s, info).empty() ? 0 : lesson03::kStepTgs));
}
