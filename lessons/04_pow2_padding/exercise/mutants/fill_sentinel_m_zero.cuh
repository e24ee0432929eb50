// Mutant (known wrong) of the fill-in exercise: the padding lanes' sentinel has m = 0 instead
// of -inf: their weight e^(0 - M) is not 0, and each adds that much of the last real row of acc
// (the row the output loop reloads for padding). Invisible while M is large (e^-M rounds away);
// the small-logits case makes it about 1.
// The grader must fail it (exit code 1) and print (a regular expression): FAIL fill small-logits: relative error
#pragma once

#include "reduce_kernels.cuh"

namespace ex_fill {

using lesson04::cmin;
using lesson04::pow2_groups;
using lesson04::pow2_min_ctas;
using lesson04::pow2_rows_per_group;
using lesson04::pow2_slots;
using lesson04::pow2_threads;
using lesson04::store4;

// pow2_lanes: the reduce over a power-of-two lane width. Grid (H, B): one CTA per
// (sequence, query head); pow2_threads(SEGMENTS_P2, HEAD_SIZE) threads. (The CTA count in
// __launch_bounds__ matters: given the thread count alone, ptxas held these kernels to 32
// registers and spilled; with it, the loads of the output loop stay in flight together.)
//   m, l  [B, H, num_segments]        per-segment max logit and sum of e^(logit - m)
//   acc   [B, H, num_segments, D]     per-segment sum of e^(logit - m) v, unnormalised
//   out   [B, H, D]
// num_segments is the scratch's real size, anything up to SEGMENTS_P2.
template <class scalar_t, int HEAD_SIZE, int SEGMENTS_P2>
__global__ void __launch_bounds__(pow2_threads(SEGMENTS_P2, HEAD_SIZE), pow2_min_ctas(SEGMENTS_P2, HEAD_SIZE))
pow2_lanes_reduce_kernel(scalar_t* __restrict__ out, const float* __restrict__ m, const float* __restrict__ l,
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
    const bool real = s < num_segments;
    const float m_s = real ? m_bh[s] : 0.f;
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
                const int row = cmin(first + i, num_segments - 1);
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

// The kernel the grader launches, for each (dtype, head size, width) it builds.
template <class scalar_t, int HEAD_SIZE, int SEGMENTS_P2>
inline constexpr auto reduce_kernel = &pow2_lanes_reduce_kernel<scalar_t, HEAD_SIZE, SEGMENTS_P2>;

}  // namespace ex_fill
