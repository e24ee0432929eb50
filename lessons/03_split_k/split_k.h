// Lesson 03's host interface: the partition kernel and the reduce as lesson 04 uses them,
// split-k plans as variants, and the automatic choice between lesson 02's single pass and
// split-k. Compiled once in split_k.cu; main.cu, the tests and lesson 04 use this header.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "decode_args.h"
#include "decode_driver.cuh"
#include "split_plan.h"
#include "split_steps.h"  // the steps' launchers, kStepTgs

namespace lesson03 {

// Every partition CTA p < s.max_partitions of every (sequence, KV head) writes its
// (m, l, acc) for the heads of its group; a partition at or past its sequence's end writes
// the sentinel (-inf, 0, 0). partition_size: a multiple of 32 (32 .. 512 are measured);
// s.max_partitions may exceed num_partitions(max_ctx, partition_size).
void launch_partitions(const pa::PagedDecodeArgs& a, int partition_size, const SplitScratch& s, cudaStream_t stream);
// The same for any unfused plan (head rows, even splits; a step's plan, tgs > 0: step 1, one CTA
// per (sequence, query head, partition), the same scratch): s.max_partitions >= grid_partitions(p, a.max_ctx).
void launch_partitions(const pa::PagedDecodeArgs& a, const SplitPlan& p, const SplitScratch& s, cudaStream_t stream);
// The reduce: one CTA per (sequence, query head), out = sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p.
void launch_reduce(const pa::PagedDecodeArgs& a, const SplitScratch& s, cudaStream_t stream);

// A whole split-k decode with a plan: partitions, then the reduce (or the fused merge),
// through scratch this lesson keeps per device (grown as needed, never shrunk).
std::string why_not(const SplitPlan& p, const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, const SplitPlan& p, cudaStream_t stream);
pa::LaunchGeometry geometry(const SplitPlan& p, const pa::DecodeShape& s, const pa::DeviceInfo& info);
pa::DecodeVariant variant(const SplitPlan& p);

// single_pass (lesson 02's auto), and `auto`: our_rule's choice between it and split-k.
pa::DecodeVariant single_pass_variant();
ShapeFacts facts_of(const pa::DecodeShape& s, int sms);
pa::DecodeVariant auto_variant();
// What `auto` runs on a shape: our_rule's choice when this GPU can run it, the partition kernel
// where head rows cannot (D 256); where neither mma kernel runs (a GPU with 99 KiB of shared
// memory a CTA, a group above 32), step 2 (fused) or step 1 (parallel_reduce) wherever a
// split was wanted or the single pass cannot run the shape; else single pass (Choice{}).
// parallel_reduce: the plan is for a reduce that loads all partitions at once (lesson 04's;
// ShapeFacts::parallel_reduce).
Choice auto_choice(const pa::DecodeShape& s, const pa::DeviceInfo& info, bool parallel_reduce = false);

// The ladder: step N (1 .. kLadderSteps) as a variant named step_name(N) that runs, on each
// shape, the plan ladder_plan gives: steps 1 and 2 the thread-group kernels at the largest
// power-of-two partition whose grid gives every SM four CTAs; steps 3 to 6 our_plan's
// partition size and fusing, with only the ideas the step has (3: fixed partitions in the
// grid's order; 4: + longest first; 5: + unit copies; 6: + head rows; 7: + the flat merge; 8: the
// partitions merged in a cluster, in the grid's order).
// partition_size > 0
// (--partition P) sets every step's partition size instead. A step that cannot run a shape
// (unit copies off sm_90, head rows outside groups of 9 to 32, ...) says why by name.
constexpr int kLadderSteps = 8;
// partitions, fused_merge, tensor_cores, longest_first, unit_copies, head_rows, flat_merge, cluster_merge
const char* step_name(int step);
SplitPlan ladder_plan(int step, const pa::DecodeShape& s, const pa::DeviceInfo& info, int partition_size = 0);
pa::DecodeVariant ladder_variant(int step, int partition_size = 0);

// What a run measures: single_pass, the ladder's eight steps, auto.
std::vector<pa::DecodeVariant> bench_variants(int partition_size = 0);
// What --sweep measures: single_pass, the plans across partition sizes (split_k_{64,128,256,512,
// 1024,4096}, split_k_fused_{128,512}, split_k_rows_{64..1024}, split_k_rows_units_{128..1024},
// split_k_units_{64..8192}, split_k_units_fused_{128,512}, split_k_units_lpt_{1024..8192}),
// steps 1 and 2 at 256, split_k_even (one split count for the whole batch, the split-count
// rule's) and auto: the data of the dispatch and long-context tables.
std::vector<pa::DecodeVariant> sweep_variants();
// Checked, not measured: partitions of 32 (many segments) in steps 1 and 2 and in the mma kernel, fused
// and not; 8 even splits; the same three with head rows (and with unit copies); step 8's cluster
// merge at 3 and (with unit copies) 4 even splits.
std::vector<pa::DecodeVariant> check_only_variants();

// The measured shapes: Table A, Table B, then the long ones (pa::long_context_shapes).
std::vector<pa::DecodeShape> bench_shapes();

// Shapes for the check: mixed lengths where short sequences leave sentinel partitions,
// ctx 513 at partition 32 (17 segments), long contexts.
std::vector<pa::DecodeShape> split_check_shapes();

}  // namespace lesson03
