// Lesson 03's first steps, host side: the thread-group partition kernels that run on every
// sm_80+ GPU (a few KiB of shared memory a CTA). Each step's instantiations compile once, in
// its stepN_*.cu; split_k.cu makes them plans (SplitPlan::tgs) and variants.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "decode_args.h"
#include "decode_driver.cuh"
#include "split_plan.h"

namespace lesson03 {
// The thread-group size the steps are built for (lesson 02's step 2 with TGS 8: 16-byte K
// loads at every head size, 16 tokens a CTA step).
constexpr int kStepTgs = 8;
}  // namespace lesson03

// Step 1: one CTA per (query head, sequence, partition) writes its partition's (m, l, acc),
// or the sentinel, to s (s.max_partitions CTAs a head: the grid's z); the reduce comes after.
namespace lesson03::step1 {
// "" if the step runs partitions of partition_size tokens on the shape on this GPU, else why not.
std::string why_not(const pa::DecodeShape& s, int partition_size, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, int partition_size, const SplitScratch& s, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int partition_size);
}  // namespace lesson03::step1

// Step 2: step 1 with the fused merge; counters [a.B * a.H], all 0, left at 0.
namespace lesson03::step2 {
std::string why_not(const pa::DecodeShape& s, int partition_size, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, int partition_size, const SplitScratch& s, unsigned* counters,
            cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int partition_size);
}  // namespace lesson03::step2
