// Mutant of the fill-in: the reduce's weighted sum stops one partition short (p <
// max_partitions - 1), so the tokens of the grid's last partition are left out.
// The grader must fail it (exit code 1) and print (a regular expression): the reduce stops one partition short
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "device_math.cuh"
#include "split_plan.h"

namespace ex_fill {

using lesson03::SplitScratch;  // the lesson's scratch layout (split_plan.h)

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// Dynamic shared memory: q (D floats) and one float per token of a partition, padded to a
// multiple of 4 floats (the compiler may read the tail with a 16-byte load).
inline size_t smem_bytes(int D, int partition_size) {
    return sizeof(float) * (static_cast<size_t>(D) + (partition_size + 3) / 4 * 4);
}

// Block-wide reduction through one shared float per warp. Every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v, float* red /* [kWarps] */) {
    v = kMax ? pa::warp_max(v) : pa::warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v = kMax ? fmaxf(v, red[w]) : v + red[w];
    __syncthreads();  // red[] is reused by the next reduction
    return v;
}

// Grid (H, B, max_partitions). Dynamic shared memory: q (HEAD_SIZE floats) then one logit per
// token of the partition.
template <class scalar_t, int HEAD_SIZE, int TGS>
__global__ void __launch_bounds__(kThreads)
partitions_kernel(
    const scalar_t* __restrict__ q,              // [B, H, D]
    const scalar_t* __restrict__ k_cache,        // [num_blocks, Hkv, block_size, D]
    const scalar_t* __restrict__ v_cache,        // [num_blocks, Hkv, block_size, D]
    const int* __restrict__ block_table,         // [B, max_blocks_per_seq]
    const int* __restrict__ context_lens,        // [B]
    int Hkv, int group, int block_size, int max_blocks_per_seq, float scale,
    int partition_size, SplitScratch scratch) {  // scratch: [B][H][max_partitions] (acc: [..][D])
    static_assert(TGS == 4 || TGS == 8 || TGS == 16, "THREAD_GROUP_SIZE is 4, 8 or 16");
    constexpr int kElems = HEAD_SIZE / TGS;               // elements of a K row (and of q) per lane
    constexpr int kPiece = kElems >= 8 ? 8 : kElems;      // 16-byte pieces; 8-byte at D 64, TGS 16
    constexpr int kPieces = kElems / kPiece;
    constexpr int kGroups = kThreads / TGS;               // tokens the CTA takes per step
    static_assert((kPiece == 8 || kPiece == 4) && kPieces * kPiece * TGS == HEAD_SIZE,
                  "a lane's slice is 4 elements or whole 8-element pieces");

    const int head = blockIdx.x, seq = blockIdx.y, part = blockIdx.z, H = gridDim.x;
    const int kv_head = head / group;
    const int ctx = context_lens[seq];
    const int t_begin = part * partition_size;            // this CTA's tokens: [t_begin, t_end)
    const int t_end = min(ctx, t_begin + partition_size);
    const int* pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    // this CTA's state: scratch.m[seq][head][part], scratch.acc[seq][head][part][:]
    const size_t row = (static_cast<size_t>(seq) * H + head) * scratch.max_partitions + part;

    if (t_begin >= ctx) {  // past the sequence's end: the sentinel, and nothing to read
        for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) scratch.acc[row * HEAD_SIZE + d] = 0.f;
        if (threadIdx.x == 0) {
            scratch.m[row] = -INFINITY;
            scratch.l[row] = 0.f;
        }
        return;
    }

    extern __shared__ float smem[];
    float* q_smem = smem;               // [HEAD_SIZE]
    float* logits = smem + HEAD_SIZE;   // [partition_size]: logits[t - t_begin]
    __shared__ float red[kWarps];

    const scalar_t* q_row = q + (static_cast<size_t>(seq) * H + head) * HEAD_SIZE;
    for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) q_smem[d] = pa::to_float(q_row[d]) * scale;
    __syncthreads();

    const int lane = threadIdx.x % 32;
    const int group_idx = threadIdx.x / TGS;      // the group's first token; it then steps by kGroups
    const int lane_in_group = threadIdx.x % TGS;
    // The group's own TGS lanes. A full-warp mask would hang when the partition's length is
    // not a multiple of kGroups (a sequence's last partition, ctx 1): the groups of a warp
    // leave the token loop at different times. The lanes of one group always agree.
    const unsigned group_mask = ((1u << TGS) - 1u) << (lane / TGS * TGS);

    float q_frag[kElems];
#pragma unroll
    for (int i = 0; i < kPieces; ++i)
#pragma unroll
        for (int e = 0; e < kPiece; ++e) q_frag[i * kPiece + e] = q_smem[(lane_in_group + i * TGS) * kPiece + e];

    // 1. logits of the partition's tokens: TGS lanes, one token, one dot product.
    float thread_max = -INFINITY;
    for (int t = t_begin + group_idx; t < t_end; t += kGroups) {
        const int block = pages[t / block_size];
        // k_cache[block, kv_head, t % block_size, :]
        const scalar_t* k = k_cache + ((static_cast<size_t>(block) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE;
        float part_sum[4] = {};  // four independent FMA chains
#pragma unroll
        for (int i = 0; i < kPieces; ++i) {
            const int d0 = (lane_in_group + i * TGS) * kPiece;
            float kf[kPiece];
            if constexpr (kPiece == 8) pa::load8(k + d0, kf);  // one 16-byte load
            else pa::load4(k + d0, kf);                        // one 8-byte load
#pragma unroll
            for (int e = 0; e < kPiece; ++e) part_sum[e % 4] += q_frag[i * kPiece + e] * kf[e];
        }
        float dot = (part_sum[0] + part_sum[1]) + (part_sum[2] + part_sum[3]);
#pragma unroll
        for (int o = TGS / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(group_mask, dot, o);
        if (lane_in_group == 0) logits[t - t_begin] = dot;
        thread_max = fmaxf(thread_max, dot);
    }
    const float m = block_reduce<true>(thread_max, red);  // the partition's max; its barrier publishes logits[]

    // 2. softmax numerators and their sum, over the partition only.
    const int n = t_end - t_begin;
    float thread_sum = 0.f;
    for (int i = threadIdx.x; i < n; i += kThreads) {
        const float e = __expf(logits[i] - m);
        logits[i] = e;
        thread_sum += e;
    }
    const float l = block_reduce<false>(thread_sum, red);

    // 3. acc[d] = sum_t p_t v_t[d], not divided by l: the partition's state goes to scratch.
    for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) {
        float acc = 0.f;
        for (int t = t_begin; t < t_end; ++t) {
            const int block = pages[t / block_size];
            // v_cache[block, kv_head, t % block_size, d]
            acc += logits[t - t_begin] * pa::to_float(v_cache[((static_cast<size_t>(block) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE + d]);
        }
        scratch.acc[row * HEAD_SIZE + d] = acc;
    }
    if (threadIdx.x == 0) {
        scratch.m[row] = m;
        scratch.l[row] = l;
    }
}

// Merges the partitions of heads first_head .. + num_heads of sequence `seq` into out, with
// `threads` threads (thread index tid): M = max_p m_p, then out = sum_p w_p acc_p / sum_p w_p l_p
// with w_p the weight of TODO(2).
// Reads go through L2 (__ldcg): the partitions were written by other CTAs, on other SMs.
template <class scalar_t, int HEAD_SIZE>
__device__ __forceinline__ void merge_partitions(scalar_t* __restrict__ out, const SplitScratch& sc, int seq, int H,
                                                 int first_head, int num_heads, int tid, int threads) {
    for (int i = tid; i < num_heads * HEAD_SIZE; i += threads) {
        const int h = first_head + i / HEAD_SIZE, d = i % HEAD_SIZE;
        const size_t row = (static_cast<size_t>(seq) * H + h) * sc.max_partitions;  // [B][H][max_partitions]
        float M = -INFINITY;
#pragma unroll 8
        for (int p = 0; p < sc.max_partitions; ++p) M = fmaxf(M, __ldcg(sc.m + row + p));
        float num = 0.f, den = 0.f;
#pragma unroll 8
        for (int p = 0; p < sc.max_partitions - 1; ++p) {
            const float w = __expf(__ldcg(sc.m + row + p) - M);  // 0 for a sentinel
            num += w * __ldcg(sc.acc + (row + p) * HEAD_SIZE + d);
            den += w * __ldcg(sc.l + row + p);
        }
        out[(static_cast<size_t>(seq) * H + h) * HEAD_SIZE + d] = pa::from_float<scalar_t>(num / den);
    }
}

// The reduce: one CTA per (query head, sequence), grid (H, B), kReduceThreads threads.
constexpr int kReduceThreads = 128;
template <class scalar_t, int HEAD_SIZE>
__global__ void __launch_bounds__(kReduceThreads)
split_k_reduce_kernel(scalar_t* __restrict__ out,  // [B, H, D]
                      SplitScratch scratch, int H) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Launched as a programmatic dependent of the partitions (sm_90): wait until they are
    // complete and their scratch is visible. Without that launch attribute this returns at once.
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    merge_partitions<scalar_t, HEAD_SIZE>(out, scratch, blockIdx.y, H, blockIdx.x, 1, threadIdx.x, kReduceThreads);
}

}  // namespace ex_fill
