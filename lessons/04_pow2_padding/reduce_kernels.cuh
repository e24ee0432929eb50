// Lesson 04: the split-k reduce over a power-of-two lane width, and why the padding belongs
// inside the reduce and not in the scratch.
//
// What changed since lesson 03: lesson 03's partition kernel is untouched; its reduce is
// rewritten three ways. A reduce that puts segments (partitions) on lanes and reduces with
// __shfl_xor_sync needs a power-of-two width, but a context has ceil(ctx / partition_size)
// segments: ctx 513 at partition 32 gives 17.
//   * pad_scratch (the wrong fix): allocate next_pow2(segments) scratch entries per head
//     and launch the partition kernel over all of them, so that the extra CTAs write the
//     sentinel (-inf, 0, 0); the reduce then reads every entry, with no mask.
//   * pow2_lanes (the right fix): the scratch keeps its real size; the reduce's width
//     SEGMENTS_P2 is a template parameter, and a lane at or past the real count loads the
//     sentinel through a masked load instead of memory. The sentinel that already makes an
//     empty partition vanish makes a padding lane vanish too: e^(-inf - M) = 0.
//   * loop: no lanes over segments at all; every thread walks the segments in order.
// All three are bit-for-bit insensitive to sentinel segments: appending them changes no
// bit of the output (tests/test_gpu_lesson04.cu checks it, tests/test_pow2_reduce.cpp
// checks the host model of the same order).
//
// Build and run: lessons/04_pow2_padding/README.md (`lesson04_pow2_padding --check`).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device_math.cuh"

namespace lesson04 {

__host__ __device__ constexpr int cmax(int a, int b) { return a > b ? a : b; }
__host__ __device__ constexpr int cmin(int a, int b) { return a < b ? a : b; }

// The output phase's layout, fixed by the head size alone: the segments fall into groups of
// pow2_rows_per_group(D) consecutive rows (2 at D 64, 4 at D 128, 8 at D 256), each summed
// in order by one thread per float4 column; the groups are then folded in halves. Because
// neither the group size nor the fold depends on SEGMENTS_P2, a wider power of two only
// appends groups of zeros, which the fold adds last: padding changes no bit.
__host__ __device__ constexpr int pow2_rows_per_group(int head_size) { return cmax(1, head_size / 32); }
__host__ __device__ constexpr int pow2_groups(int segments_p2, int head_size) {
    return cmax(1, segments_p2 / pow2_rows_per_group(head_size));
}
// Group slots of D/4 threads: one per group, up to max(256, SEGMENTS_P2) threads (then a
// thread sums several groups, at most 8: the first levels of the fold happen in its
// registers). More threads per CTA would help a grid of a few CTAs and starve a grid of
// thousands (a batch of 16 sequences x 64 heads), which then runs in more waves.
__host__ __device__ constexpr int pow2_slots(int segments_p2, int head_size) {
    return cmin(pow2_groups(segments_p2, head_size), cmax(256, segments_p2) / (head_size / 4));
}
// Threads of one pow2 reduce CTA: a lane per segment (SEGMENTS_P2), at least one warp, and
// one per (group slot, float4 column), so that the rows of the scratch are loaded together.
__host__ __device__ constexpr int pow2_threads(int segments_p2, int head_size) {
    return cmax(cmax(32, segments_p2), pow2_slots(segments_p2, head_size) * (head_size / 4));
}
// CTAs per SM the compiler should plan registers for: 1024 threads' worth (64 registers a
// thread from 128 threads up), so that a large grid keeps several CTAs on each SM.
__host__ __device__ constexpr int pow2_min_ctas(int segments_p2, int head_size) {
    return cmin(8, cmax(1, 1024 / pow2_threads(segments_p2, head_size)));
}

// Four floats -> four 16-bit outputs in one 8-byte store (p 8-byte aligned).
template <class T>
__device__ __forceinline__ void store4(T* p, float4 v) {
    alignas(8) T h[4] = {pa::from_float<T>(v.x), pa::from_float<T>(v.y), pa::from_float<T>(v.z), pa::from_float<T>(v.w)};
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(h);
}

// pad_scratch (kMasked = false) and pow2_lanes (kMasked = true). Grid (H, B): one CTA per
// (sequence, query head); pow2_threads(SEGMENTS_P2, HEAD_SIZE) threads. (The CTA count in
// __launch_bounds__ matters: given the thread count alone, ptxas held these kernels to 32
// registers and spilled; with it, the loads of the output loop stay in flight together.)
//   m, l  [B, H, num_segments]        per-segment max logit and sum of e^(logit - m)
//   acc   [B, H, num_segments, D]     per-segment sum of e^(logit - m) v, unnormalised
//   out   [B, H, D]
// pow2_lanes: num_segments is the scratch's real size, anything up to SEGMENTS_P2.
// pad_scratch: the scratch was padded, num_segments == SEGMENTS_P2.
template <class scalar_t, int HEAD_SIZE, int SEGMENTS_P2, bool kMasked>
__global__ void __launch_bounds__(pow2_threads(SEGMENTS_P2, HEAD_SIZE), pow2_min_ctas(SEGMENTS_P2, HEAD_SIZE))
pow2_reduce_kernel(scalar_t* __restrict__ out, const float* __restrict__ m, const float* __restrict__ l,
                   const float* __restrict__ acc, int num_segments) {
    static_assert(SEGMENTS_P2 >= 1 && SEGMENTS_P2 <= 1024 && (SEGMENTS_P2 & (SEGMENTS_P2 - 1)) == 0,
                  "SEGMENTS_P2 is a power of two from 1 to 1024 (32 lanes x 32 warps)");
    static_assert(HEAD_SIZE % 4 == 0 && HEAD_SIZE / 4 <= 1024, "the output is written as float4 columns");
    constexpr int kThreads = pow2_threads(SEGMENTS_P2, HEAD_SIZE);
    // Segments on lanes: a warp holds min(SEGMENTS_P2, 32); more take several warps.
    constexpr int kWidth = cmin(SEGMENTS_P2, 32);
    constexpr int kWarps = SEGMENTS_P2 / kWidth;  // warps holding segments: 1 .. 32
    // The output: D/4 float4 columns; the segments in groups of kRows rows; kSlots group
    // slots of kCols threads, each slot holding kGroupsPerSlot groups.
    constexpr int kCols = HEAD_SIZE / 4;
    constexpr int kRows = pow2_rows_per_group(HEAD_SIZE);
    constexpr int kGroups = pow2_groups(SEGMENTS_P2, HEAD_SIZE);
    constexpr int kSlots = pow2_slots(SEGMENTS_P2, HEAD_SIZE);
    constexpr int kGroupsPerSlot = kGroups / kSlots;
    static_assert(kSlots * kCols <= kThreads && kGroupsPerSlot * kSlots == kGroups, "one thread per (slot, column)");

    __shared__ float w_smem[SEGMENTS_P2];        // e^(m_s - M), for the output phase
    __shared__ float warp_max[kWarps], warp_sum[kWarps];
    __shared__ float4 slot_sum[kSlots > 1 ? kSlots * kCols : 1];

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // `auto`'s pipeline launches this as a programmatic dependent of the partitions (sm_90):
    // wait until their scratch is complete and visible. Launched plainly, this returns at once.
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const size_t bh = static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x;  // (sequence, head)
    const float* m_bh = m + bh * num_segments;
    const float* l_bh = l + bh * num_segments;
    const float* acc_bh = acc + bh * num_segments * HEAD_SIZE;

    // 1. Segments -> lanes. With fewer segments than a warp has lanes, every group of
    // SEGMENTS_P2 lanes holds all of them (the loads broadcast), so every lane ends with the
    // result and no lane needs a mask of its own. Lanes at or past the real count are the
    // padding: a masked load gives them the sentinel, and nothing past the scratch is read.
    // (With more threads than segments, threads at or past SEGMENTS_P2 hold padding too.)
    const int s = SEGMENTS_P2 <= 32 ? lane % kWidth : t;
    const bool real = s < (kMasked ? num_segments : SEGMENTS_P2);  // pad_scratch: every entry is memory
    const float m_s = real ? m_bh[s] : -INFINITY;
    const float l_s = real ? l_bh[s] : 0.f;

    // 2. M = max_s m_s: a butterfly over the kWidth lanes (xor offsets below kWidth stay
    // inside a group), then, for more than 32 segments, one over the kWarps warp results.
    float M = m_s;
#pragma unroll
    for (int o = kWidth / 2; o > 0; o /= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if constexpr (kWarps > 1) {
        if (lane == 0 && warp < kWarps) warp_max[warp] = M;
        __syncthreads();
        M = lane < kWarps ? warp_max[lane] : -INFINITY;
#pragma unroll
        for (int o = kWarps / 2; o > 0; o /= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        // the butterfly over kWarps lanes leaves the result in lanes 0 .. kWarps-1 only (with
        // fewer than 32 warps, lanes past them combined -inf with -inf): lane 0's for all
        M = __shfl_sync(0xffffffffu, M, 0);
    }

    // 3. The weights, and L = sum_s w_s l_s by the same two levels. A sentinel or padding
    // lane has m_s = -inf and M is finite (segment 0 holds a token): w_s = e^(-inf) = 0.
    // __fmul_rn / __fadd_rn: never fused into an fma, so the order below is the order run.
    const float w = expf(m_s - M);
    float L = __fmul_rn(w, l_s);
#pragma unroll
    for (int o = kWidth / 2; o > 0; o /= 2) L = __fadd_rn(L, __shfl_xor_sync(0xffffffffu, L, o));
    if constexpr (kWarps > 1) {
        if (lane == 0 && warp < kWarps) warp_sum[warp] = L;
    }
    if (t < SEGMENTS_P2) w_smem[s] = w;  // one writer per segment (for SEGMENTS_P2 <= 32, warp 0's first lanes)
    __syncthreads();
    if constexpr (kWarps > 1) {
        L = lane < kWarps ? warp_sum[lane] : 0.f;
#pragma unroll
        for (int o = kWarps / 2; o > 0; o /= 2) L = __fadd_rn(L, __shfl_xor_sync(0xffffffffu, L, o));
        L = __shfl_sync(0xffffffffu, L, 0);  // as for M: lanes past kWarps summed zeros
    }

    // 4. out = sum_s w_s acc_s / L. Thread (slot j, column c) sums, for each of its groups
    // g = j + k * kSlots, the group's kRows rows in order, one float4 of each row (a warp
    // reads whole 512-byte rows at D 128); all its loads are independent, so they are in
    // flight together. The groups are then folded in halves: group g + kGroups/2 onto g, and
    // so on; the levels that pair groups of one slot happen in registers, the rest through
    // shared memory. Both orders are fixed by the segment index alone, whatever SEGMENTS_P2
    // is, so padding (groups of zeros, added last) changes no bit.
    const int c = t % kCols, j = t / kCols;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (j < kSlots) {
        float4 part[kGroupsPerSlot];
#pragma unroll
        for (int k = 0; k < kGroupsPerSlot; ++k) {
            const int first = (j + k * kSlots) * kRows;
            part[k] = make_float4(0.f, 0.f, 0.f, 0.f);
            const float4* acc4 = reinterpret_cast<const float4*>(acc_bh) + c;
#pragma unroll
            for (int i = 0; i < cmin(kRows, SEGMENTS_P2); ++i) {
                // pow2_lanes: a padding row reloads the last real row (an L1 hit; nothing past
                // the scratch is read, and no branch stands between the loads, which would keep
                // them from being in flight together) with its weight w_smem = 0: the fma adds
                // an exact zero, as the model's skipped row does.
                const int row = kMasked ? cmin(first + i, num_segments - 1) : first + i;
                const float ws = w_smem[first + i];
                const float4 a = acc4[static_cast<size_t>(row) * kCols];
                part[k].x = fmaf(ws, a.x, part[k].x);
                part[k].y = fmaf(ws, a.y, part[k].y);
                part[k].z = fmaf(ws, a.z, part[k].z);
                part[k].w = fmaf(ws, a.w, part[k].w);
            }
        }
#pragma unroll
        for (int half = kGroupsPerSlot / 2; half > 0; half /= 2)
#pragma unroll
            for (int k = 0; k < half; ++k)
                part[k] = make_float4(part[k].x + part[k + half].x, part[k].y + part[k + half].y,
                                      part[k].z + part[k + half].z, part[k].w + part[k + half].w);
        o = part[0];
    }
    if constexpr (kSlots > 1) {
        if (j < kSlots) slot_sum[j * kCols + c] = o;
        __syncthreads();
#pragma unroll
        for (int half = kSlots / 2; half > 0; half /= 2) {
            for (int i = t; i < half * kCols; i += kThreads) {
                const float4 x = slot_sum[i], y = slot_sum[i + half * kCols];
                slot_sum[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
            }
            __syncthreads();
        }
        o = slot_sum[c];
    }
    if (t < kCols)
        store4(out + bh * HEAD_SIZE + 4 * c, make_float4(o.x / L, o.y / L, o.z / L, o.w / L));
}

// loop: the plain comparison. Grid (H, B); HEAD_SIZE threads, one output element each;
// dynamic shared memory: num_segments floats. No lane holds a segment, so no width has to
// be a power of two: every thread walks every segment, in order.
template <class scalar_t, int HEAD_SIZE>
__global__ void __launch_bounds__(HEAD_SIZE, 1)
loop_reduce_kernel(scalar_t* __restrict__ out, const float* __restrict__ m, const float* __restrict__ l,
                   const float* __restrict__ acc, int num_segments) {
    extern __shared__ float w_smem[];  // [num_segments]
    const int d = threadIdx.x;
    const size_t bh = static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    const float* m_bh = m + bh * num_segments;
    const float* l_bh = l + bh * num_segments;
    const float* acc_bh = acc + bh * num_segments * HEAD_SIZE;

    // pass 1: M, each thread reading every m_s (the same address across a warp: one load)
    float M = -INFINITY;
    for (int s = 0; s < num_segments; ++s) M = fmaxf(M, m_bh[s]);
    // pass 2: the weights, each computed once
    for (int s = d; s < num_segments; s += HEAD_SIZE) w_smem[s] = expf(m_bh[s] - M);
    __syncthreads();
    // pass 3: L and this thread's output element, segment by segment (a sentinel adds
    // fma(0, 0, x) = x: nothing)
    float L = 0.f, o = 0.f;
    for (int s = 0; s < num_segments; ++s) {
        const float ws = w_smem[s];
        L = fmaf(ws, l_bh[s], L);
        o = fmaf(ws, acc_bh[static_cast<size_t>(s) * HEAD_SIZE + d], o);
    }
    out[bh * HEAD_SIZE + d] = pa::from_float<scalar_t>(o / L);
}

}  // namespace lesson04
