// Lesson 04's host interface: the three reduces alone (over a scratch that lesson 03's
// partition kernel filled), the scratch each fix allocates, and the full pipelines
// (partition kernel + reduce) as the decode driver runs them. The kernels are in
// reduce_kernels.cuh; each reduce's instantiations compile once, in pad_scratch.cu,
// pow2_lanes.cu and loop.cu; the rest in lesson04.cu. main.cu and the tests use this.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "decode_args.h"
#include "decode_driver.cuh"
#include "device_buffer.cuh"
#include "pow2_plan.h"
#include "split_k.h"
#include "split_workspace.cuh"

namespace lesson04 {

// ---- the reduces alone: out[B][H][D] from s (m, l, acc with s.max_partitions entries per
// (sequence, head)); a.out, a.B, a.H, a.D and a.dtype are what they read of `a`.

// The wrong fix's reduce: reads all s.max_partitions entries, which must be a power of two.
void launch_pad_scratch(const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream);
// The right fix's reduce: width next_pow2(s.max_partitions), lanes past the scratch masked.
// dependent: launched as a programmatic dependent of the kernel before it on the stream
// (sm_90 code only; `auto`'s pipeline), else plainly (the sweep, which compares the reduces).
void launch_pow2_lanes(const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream,
                       bool dependent = false);
// The plain loop over the segments.
void launch_loop(const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream);
void launch_reduce(Fix f, const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream);

// "" when fix f's reduce is built for this head size and scratch (entries per head), else
// one line saying why not (a head size other than 64/128/256, more than kMaxSegments
// entries, pad_scratch on a scratch that is not a power of two).
std::string reduce_why_not(Fix f, int head_size, int partitions);
// Threads per CTA of fix f's reduce (grid (H, B)).
int reduce_threads(Fix f, int head_size, int partitions);

// ---- scratch

// m, l and acc for B x H x partitions entries of head size D, each its own allocation of
// exactly that size, so that compute-sanitizer's memcheck sees a read past any of them. One
// set per (device, stream): launches on different streams may run at the same time.
// Reallocated only when the size changes (so never inside a timing loop), after the stream's
// launches in flight.
class Scratch {
  public:
    lesson03::SplitScratch get(int B, int H, int D, int partitions, cudaStream_t stream);

  private:
    struct Buffers {
        pa::DeviceBuffer<float> m, l, acc;
    };
    pa::PerStream<Buffers> sets_;
};

// ---- the pipelines: lesson 03's partition kernel, then fix f's reduce

// The partition size a pipeline uses on shape s: partition_size if non-zero, else
// pick_partition_size (the smallest of 32..512 with at most kMaxSegments segments).
int partition_size_for(const pa::DecodeShape& s, int partition_size = 0);
// Lesson 03's partitions at the pipeline's size on shape s: its mma partition kernel where this
// GPU runs it, else its step 1 (the thread-group partitions, a few KiB of shared memory: every
// sm_80+ GPU). Both write the same scratch (split_plan.h), so every reduce here reads either.
lesson03::SplitPlan partitions_plan(const pa::DecodeShape& s, int partition_size, const pa::DeviceInfo& info);
// Partition kernel over the scratch fix f allocates (pad_scratch: next_pow2(segments) entries
// per head, so the grid grows too and the extra CTAs write sentinels), then the reduce.
void launch_pipeline(Fix f, const pa::PagedDecodeArgs& a, int partition_size, Scratch& scratch, cudaStream_t stream);
// "" when the pipeline can run the shape on this GPU (partition_size 0: the lesson's
// choice): lesson 03's partition kernel must take it (lesson03::why_not), and the reduce.
std::string why_not(Fix f, const pa::DecodeShape& s, const pa::DeviceInfo& info, int partition_size = 0);

// The pipeline as a decode variant (name: fix_name(f)), with a scratch of its own. Its
// geometry is the partition kernel's (lesson03::geometry), with pad_scratch's padded grid.
pa::DecodeVariant variant(Fix f, int partition_size = 0);
std::vector<pa::DecodeVariant> all_variants();

// ---- lesson 03's plans with this lesson's reduce (the --plans measurement)

// Lesson 03's `auto` with its reduce replaced: the same choice (single pass, or partitions
// of lesson 03's size, head rows for groups of 9 to 32), never fused, and the reduce
// pow2_lanes launched as a programmatic dependent of the partitions (on sm_90 code) instead
// of lesson 03's loop over the partitions. Name: auto.
pa::DecodeVariant auto_variant();
// A fixed partition size under lesson 03's kernels (head rows where the GPU takes them for
// the group, else the partition kernel), then pow2_lanes as in auto: split_pow2_<P>.
pa::DecodeVariant split_pow2_variant(int partition_size);
// auto and split_pow2_{128,256,512,1024,4096}
std::vector<pa::DecodeVariant> plan_variants();
// What `auto` runs on a shape, as a name: single_pass, or lesson 03's plan name with its
// reduce (split_k_rows_128 + pow2_lanes).
std::string auto_pick(const pa::DecodeShape& s, const pa::DeviceInfo& info);

// The lesson's --check shapes: the catalogue's awkward ones, the post's ctx 513 at
// partition 32 (17 segments), mixed lengths whose short sequences leave sentinel
// partitions, and 514 and 1024 segments (more than a warp has lanes).
std::vector<pa::DecodeShape> check_shapes();

}  // namespace lesson04
