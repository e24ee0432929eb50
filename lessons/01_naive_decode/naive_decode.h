// Lesson 01's host interface: the launcher and what it can run. Compiled once in
// naive_decode.cu; main.cu, the tests and later lessons (for comparison) use this.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "decode_args.h"
#include "decode_driver.cuh"

namespace lesson01 {

// Dynamic shared memory the kernel needs: q plus one float per token of the longest context.
size_t smem_bytes(int D, int max_ctx);

// Empty if the shape can run on this GPU; otherwise why not (a context too long for
// shared memory points at lesson 03).
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);

// The variant as the decode driver runs it: named `naive`.
pa::DecodeVariant variant();

}  // namespace lesson01
