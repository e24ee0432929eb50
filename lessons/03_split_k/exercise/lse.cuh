// Lesson 03's extension exercise (exercise/README.md): split-k that also returns the
// log-sum-exp of each (sequence, query head) row, lse = log sum_t e^(s_t) over the row's scaled
// scores s_t, what a server needs to merge attention over two KV segments (a shared prefix and
// each request's own suffix: out = e^(lse_A - lse) out_A + e^(lse_B - lse) out_B with
// lse = log(e^lse_A + e^lse_B)). The partitions are the lesson's step 1; this is its reduce
// (split_reduce.cuh) with one more output. Fill in TODO(1) and TODO(2). Grade it with
//   lesson03_exercise --grade --exercise lse
// Keep the griddepcontrol.wait: on sm_90 the grader launches this reduce as a programmatic
// dependent of the partitions, as the lesson does, and only that wait orders the two.
#pragma once

#include <cuda_runtime.h>

#include "device_math.cuh"
#include "split_plan.h"

namespace ex_lse {

using lesson03::SplitScratch;  // the lesson's scratch layout (split_plan.h)

// Merges the partitions of heads first_head .. + num_heads of sequence `seq` into out, and each
// row's log-sum-exp into lse, with `threads` threads (thread index tid): M = max_p m_p, then
// out = sum_p w_p acc_p / sum_p w_p l_p
// with w_p = exp(m_p - M). Sentinels (-inf, 0, 0) get w_p = 0: no mask, no partition count.
// Reads go through L2 (__ldcg): the partitions were written by other CTAs, on other SMs.
template <class scalar_t, int HEAD_SIZE>
__device__ __forceinline__ void merge_partitions(scalar_t* __restrict__ out, float* __restrict__ lse, const SplitScratch& sc,
                                                 int seq, int H, int first_head, int num_heads, int tid, int threads) {
    for (int i = tid; i < num_heads * HEAD_SIZE; i += threads) {
        const int h = first_head + i / HEAD_SIZE, d = i % HEAD_SIZE;
        const size_t row = (static_cast<size_t>(seq) * H + h) * sc.max_partitions;  // [B][H][max_partitions]
        float M = -INFINITY;
#pragma unroll 8
        for (int p = 0; p < sc.max_partitions; ++p) M = fmaxf(M, __ldcg(sc.m + row + p));
        float num = 0.f, den = 0.f;
#pragma unroll 8
        for (int p = 0; p < sc.max_partitions; ++p) {
            const float w = __expf(__ldcg(sc.m + row + p) - M);  // 0 for a sentinel
            num += w * __ldcg(sc.acc + (row + p) * HEAD_SIZE + d);
            den += w * __ldcg(sc.l + row + p);
        }
        out[(static_cast<size_t>(seq) * H + h) * HEAD_SIZE + d] = pa::from_float<scalar_t>(num / den);
        // TODO(1) (1 line): the row's log-sum-exp, log sum_t e^(s_t), from M and den.

        // TODO(2) (1 to 3 lines): write it to lse[seq][h] ([B, H]), once per row: every thread
        // of the row has the same value, and one write is enough.
    }
}

// The reduce: one CTA per (query head, sequence), grid (H, B), kReduceThreads threads.
constexpr int kReduceThreads = 128;
template <class scalar_t, int HEAD_SIZE>
__global__ void __launch_bounds__(kReduceThreads)
lse_reduce_kernel(scalar_t* __restrict__ out,  // [B, H, D]
                  float* __restrict__ lse,     // [B, H]: log sum_t e^(s_t), s_t the scaled scores
                  SplitScratch scratch, int H) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Launched as a programmatic dependent of the partitions (sm_90): wait until they are
    // complete and their scratch is visible. Without that launch attribute this returns at once.
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    merge_partitions<scalar_t, HEAD_SIZE>(out, lse, scratch, blockIdx.y, H, blockIdx.x, 1, threadIdx.x, kReduceThreads);
}

}  // namespace ex_lse
