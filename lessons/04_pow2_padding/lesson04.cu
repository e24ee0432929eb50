// Lesson 04's host side: which reduce runs what, the scratch each fix allocates, and the
// pipelines (lesson 03's partition kernel, then one of the reduces) as decode variants.
#include "lesson04.h"

#include <memory>

#include "cuda_check.cuh"
#include "reduce_kernels.cuh"
#include "table.h"

namespace lesson04 {

std::string reduce_why_not(Fix f, int head_size, int partitions) {
    if (head_size != 64 && head_size != 128 && head_size != 256)
        return pa::strf("no %s reduce is built for head size %d (64, 128, 256 are)", fix_name(f), head_size);
    if (partitions < 1) return pa::strf("a scratch of %d entries per head has no segment 0", partitions);
    if (partitions > kMaxSegments)
        return pa::strf("%d segments, more than the %d lanes (32 x 32) of the widest reduce built", partitions, kMaxSegments);
    if (f == Fix::pad_scratch && next_pow2(partitions) != partitions)
        return pa::strf("pad_scratch reads every entry of a scratch padded to a power of two, and %d is not one", partitions);
    return "";
}

int reduce_threads(Fix f, int head_size, int partitions) {
    return f == Fix::loop ? head_size : pow2_threads(next_pow2(partitions), head_size);
}

void launch_reduce(Fix f, const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream) {
    switch (f) {
        case Fix::pad_scratch: return launch_pad_scratch(a, s, stream);
        case Fix::pow2_lanes: return launch_pow2_lanes(a, s, stream);
        case Fix::loop: return launch_loop(a, s, stream);
    }
}

lesson03::SplitScratch Scratch::get(int B, int H, int D, int partitions, cudaStream_t stream) {
    return sets_.with(stream, [&](Buffers& b) {
        const size_t entries = static_cast<size_t>(B) * H * partitions;
        if (b.m.size() != entries || b.acc.size() != entries * D) {
            CUDA_CHECK(cudaStreamSynchronize(stream));  // a launch in flight on this stream may still use the old ones
            b.m.allocate(entries);        // [B, H, partitions]
            b.l.allocate(entries);        // [B, H, partitions]
            b.acc.allocate(entries * D);  // [B, H, partitions, D]
        }
        lesson03::SplitScratch s;
        s.m = b.m.get();
        s.l = b.l.get();
        s.acc = b.acc.get();
        s.max_partitions = partitions;
        return s;
    });
}

int partition_size_for(const pa::DecodeShape& s, int partition_size) {
    return partition_size != 0 ? partition_size : pick_partition_size(s.max_ctx());
}

void launch_pipeline(Fix f, const pa::PagedDecodeArgs& a, int partition_size, Scratch& scratch, cudaStream_t stream) {
    if (!is_partition_size(partition_size))
        throw pa::CudaError(pa::strf("lesson04: partition size %d is not one of 32, 64, 128, 256, 512", partition_size));
    const int segments = segments_for(a.max_ctx, partition_size);
    const lesson03::SplitScratch s = scratch.get(a.B, a.H, a.D, scratch_partitions(f, segments), stream);
    // one CTA per entry: pad_scratch's grid is padded too
    lesson03::launch_partitions(a, partitions_plan(pa::launch_shape(a), partition_size, pa::current_device_info()), s, stream);
    launch_reduce(f, a, s, stream);
}

lesson03::SplitPlan partitions_plan(const pa::DecodeShape& s, int partition_size, const pa::DeviceInfo& info) {
    lesson03::SplitPlan p;
    p.partition_size = partition_size_for(s, partition_size);
    if (lesson03::why_not(p, s, info).empty()) return p;
    lesson03::SplitPlan step = p;  // lesson 03's step 1: the same scratch, a few KiB of shared memory
    step.tgs = lesson03::kStepTgs;
    return lesson03::why_not(step, s, info).empty() ? step : p;
}

std::string why_not(Fix f, const pa::DecodeShape& s, const pa::DeviceInfo& info, int partition_size) {
    const int ps = partition_size_for(s, partition_size);
    if (ps == 0)
        return pa::strf("ctx %d needs more than %d segments even at partition 512, and the widest reduce built has %d lanes",
                        s.max_ctx(), kMaxSegments, kMaxSegments);
    if (!is_partition_size(ps)) return pa::strf("partition size %d is not one of 32, 64, 128, 256, 512", ps);
    const std::string reduce = reduce_why_not(f, s.D, scratch_partitions(f, segments_for(s.max_ctx(), ps)));
    if (!reduce.empty()) return reduce;
    const std::string partitions = lesson03::why_not(partitions_plan(s, ps, info), s, info);
    return partitions.empty() ? "" : "lesson 03's partition kernel: " + partitions;
}

pa::DecodeVariant variant(Fix f, int partition_size) {
    auto scratch = std::make_shared<Scratch>();
    pa::DecodeVariant v;
    v.name = fix_name(f);
    v.why_not = [f, partition_size](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        return why_not(f, s, info, partition_size);
    };
    v.launch = [f, partition_size, scratch](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        const int ps = partition_size != 0 ? partition_size : pick_partition_size(a.max_ctx);
        launch_pipeline(f, a, ps, *scratch, st);
    };
    v.geometry = [f, partition_size](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const lesson03::SplitPlan plan = partitions_plan(s, partition_size, info);
        pa::LaunchGeometry g = lesson03::geometry(plan, s, info);  // the partition kernel's
        g.ctas = g.ctas / g.partitions * scratch_partitions(f, segments_for(s.max_ctx(), plan.partition_size));
        return g;
    };
    return v;
}

std::vector<pa::DecodeVariant> all_variants() {
    std::vector<pa::DecodeVariant> out;
    for (Fix f : all_fixes()) out.push_back(variant(f));
    return out;
}

namespace {

// Partitions of plan p (never fused) into the variant's scratch, then the reduce: pow2_lanes
// as a programmatic dependent, or, past the widest pow2 reduce built, lesson 03's own. A
// cluster plan (lesson 03's step 8) merges in its own launch: no scratch, no reduce.
void launch_plan(const pa::PagedDecodeArgs& a, const lesson03::SplitPlan& p, Scratch& scratch, cudaStream_t stream) {
    if (p.cluster) {
        lesson03::launch(a, p, stream);
        return;
    }
    const lesson03::SplitScratch s = scratch.get(a.B, a.H, a.D, lesson03::grid_partitions(p, a.max_ctx), stream);
    lesson03::launch_partitions(a, p, s, stream);
    if (reduce_why_not(Fix::pow2_lanes, a.D, s.max_partitions).empty()) launch_pow2_lanes(a, s, stream, true);
    else lesson03::launch_reduce(a, s, stream);
}

// split_pow2_<P>'s plan on a shape: head rows where lesson 03 takes them, else the partition
// kernel; unit copies where lesson 03's rule would use them and the GPU and pages allow; on a
// GPU that fits neither, lesson 03's step 1.
lesson03::SplitPlan fixed_plan(int partition_size, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    lesson03::SplitPlan p;
    p.partition_size = partition_size;
    p.head_rows = p.flat_merge = true;  // lesson 03's last head-row kernel (step 7)
    if (!lesson03::why_not(p, s, info).empty()) p.head_rows = p.flat_merge = false;
    p.units = partition_size >= lesson03::kUnitsSmallestPartition;
    if (p.units && !lesson03::why_not(p, s, info).empty()) p.units = false;
    if (!lesson03::why_not(p, s, info).empty()) {  // the mma kernels do not fit: lesson 03's step 1
        lesson03::SplitPlan step;
        step.partition_size = partition_size;
        step.tgs = lesson03::kStepTgs;
        if (lesson03::why_not(step, s, info).empty()) p = step;
    }
    return p;
}

// Why lesson 03 refuses a plan on a shape, as this lesson says it ("" when it takes it).
std::string plan_why_not(const lesson03::SplitPlan& p, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const std::string partitions = lesson03::why_not(p, s, info);
    if (!partitions.empty()) return "lesson 03's partition kernel: " + partitions;
    return "";
}

// `auto`'s choice: lesson 03's rule told that the reduce loads every partition at once
// (parallel_reduce: no floor of 1/16 of the context, no 64-token partitions, one partition CTA
// per SM for groups up to 8 instead of two), unfused (with a reduce this cheap, the fused
// merge, one CTA walking every partition of its heads, no longer pays for the launch it saves).
lesson03::Choice auto_choice(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    lesson03::Choice c = lesson03::auto_choice(s, info, /*parallel_reduce=*/true);
    c.plan.fused = false;
    return c;
}

}  // namespace

std::string auto_pick(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const lesson03::Choice c = auto_choice(s, info);
    if (!c.split) return "single_pass";
    const int parts = lesson03::grid_partitions(c.plan, s.max_ctx());
    if (c.plan.cluster) return lesson03::plan_name(c.plan);  // merged in its clusters: no reduce
    return lesson03::plan_name(c.plan) +
           (reduce_why_not(Fix::pow2_lanes, s.D, parts).empty() ? " + pow2_lanes" : " + lesson 03's reduce");
}

pa::DecodeVariant auto_variant() {
    const pa::DecodeVariant sp = lesson03::single_pass_variant();
    auto scratch = std::make_shared<Scratch>();
    pa::DecodeVariant v;
    v.name = "auto";
    v.why_not = [sp](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const lesson03::Choice c = auto_choice(s, info);
        return c.split ? plan_why_not(c.plan, s, info) : sp.why_not(s, info);
    };
    v.launch = [sp, scratch](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        const lesson03::Choice c = auto_choice(pa::launch_shape(a), pa::current_device_info());
        if (c.split) launch_plan(a, c.plan, *scratch, st);
        else sp.launch(a, st);
    };
    v.geometry = [sp](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const lesson03::Choice c = auto_choice(s, info);
        return c.split ? lesson03::geometry(c.plan, s, info) : sp.geometry(s, info);
    };
    return v;
}

pa::DecodeVariant split_pow2_variant(int partition_size) {
    auto scratch = std::make_shared<Scratch>();
    pa::DecodeVariant v;
    v.name = "split_pow2_" + std::to_string(partition_size);
    v.why_not = [partition_size](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const lesson03::SplitPlan p = fixed_plan(partition_size, s, info);
        const std::string reduce = reduce_why_not(Fix::pow2_lanes, s.D, lesson03::grid_partitions(p, s.max_ctx()));
        return reduce.empty() ? plan_why_not(p, s, info) : reduce;
    };
    v.launch = [partition_size, scratch](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        launch_plan(a, fixed_plan(partition_size, pa::launch_shape(a), pa::current_device_info()), *scratch, st);
    };
    v.geometry = [partition_size](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        return lesson03::geometry(fixed_plan(partition_size, s, info), s, info);
    };
    return v;
}

std::vector<pa::DecodeVariant> plan_variants() {
    std::vector<pa::DecodeVariant> out = {auto_variant()};
    for (int size : {128, 256, 512, 1024, 4096}) out.push_back(split_pow2_variant(size));
    return out;
}

std::vector<pa::DecodeShape> check_shapes() {
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    std::vector<pa::DecodeShape> out = pa::decode_check_shapes();  // partition 32: 1 to 94 segments
    // the post's case: 17 segments, pow2 width 32
    out.push_back(pa::make_shape("post-ctx513-p32", 8, 4, {513}, 128, 16, b));
    // 125 segments (width 128); the sequences of 1, 33 and 100 tokens are mostly sentinels
    out.push_back(pa::make_shape("mixed-sentinels", 8, 4, {1, 33, 513, 4000, 100}, 128, 8, f));
    // 514 segments: pad_scratch allocates and launches 1024
    out.push_back(pa::make_shape("segments-514", 8, 2, {16417, 200}, 128, 16, b));
    // 1024 segments, the widest reduce (32 warps), with the widest rows (D 256)
    out.push_back(pa::make_shape("segments-1024-D256", 4, 4, {32768}, 256, 32, f));
    return out;
}

}  // namespace lesson04
