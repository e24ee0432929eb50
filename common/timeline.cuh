// The device side of timeline.h: where a TIMELINE build of a kernel writes its clock
// stamps. The record's address is a module variable set before the launch, so the kernels
// that are checked and timed keep their parameter lists (and their TIMELINE = false builds
// never touch it).
//
// Include this in the one translation unit that holds the kernel and its launcher: each
// such unit has its own copy of the variable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.cuh"
#include "device_math.cuh"
#include "timeline.h"

namespace pa {

struct TimelineTarget {
    uint64_t* record = nullptr;  // [ctas][stride]
    int stride = 0;
};

static __device__ TimelineTarget g_timeline_target;

// This CTA's row of the record; the grid is (Hkv, B).
__device__ __forceinline__ uint64_t* timeline_row() {
    return g_timeline_target.record + (static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * g_timeline_target.stride;
}

// Host: where the next launch of a TIMELINE build writes (stream-ordered).
static inline void set_timeline_target(uint64_t* record, int stride, cudaStream_t stream) {
    const TimelineTarget t{record, stride};
    CUDA_CHECK(cudaMemcpyToSymbolAsync(g_timeline_target, &t, sizeof(t), 0, cudaMemcpyHostToDevice, stream));
}

}  // namespace pa
