// Mutant (known wrong) of the fill-in exercise: the full-warp mask 0xffffffff instead of the group's
// own lanes (the trap of step 1). Where a context is not a multiple of the tokens one CTA step takes
// (128 / TGS), some groups of a warp go round the token loop once more than the others; their
// shuffle names lanes that have left the loop and wait at the block reduce's barrier, so it waits
// for shuffles that never come (the GPU hangs), or, on hardware that does not wait, reads
// values nobody wrote.
// The grader must fail it (exit code 4) and print (a regular expression): HANG fill
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "device_math.cuh"

namespace ex_fill {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// Dynamic shared memory: q (D floats) and one float per token of the longest context,
// padded to a multiple of 4 floats (the compiler may read the tail with a 16-byte load).
inline size_t smem_bytes(int D, int max_ctx) { return sizeof(float) * (static_cast<size_t>(D) + (max_ctx + 3) / 4 * 4); }

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

// Dynamic shared memory: q (HEAD_SIZE floats) then one logit per token of the context.
template <class scalar_t, int HEAD_SIZE, int TGS>
__global__ void __launch_bounds__(kThreads)
decode_kernel(
    scalar_t* __restrict__ out,                  // [B, H, D]
    const scalar_t* __restrict__ q,              // [B, H, D]
    const scalar_t* __restrict__ k_cache,        // [num_blocks, Hkv, block_size, D]
    const scalar_t* __restrict__ v_cache,        // [num_blocks, Hkv, block_size, D]
    const int* __restrict__ block_table,         // [B, max_blocks_per_seq]
    const int* __restrict__ context_lens,        // [B]
    int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
    static_assert(TGS == 4 || TGS == 8 || TGS == 16, "THREAD_GROUP_SIZE is 4, 8 or 16");
    constexpr int kElems = HEAD_SIZE / TGS;               // elements of a K row (and of q) per lane
    constexpr int kPiece = kElems >= 8 ? 8 : kElems;      // 16-byte pieces; 8-byte at D 64, TGS 16
    constexpr int kPieces = kElems / kPiece;
    constexpr int kGroups = kThreads / TGS;               // tokens the CTA takes per step
    static_assert((kPiece == 8 || kPiece == 4) && kPieces * kPiece * TGS == HEAD_SIZE,
                  "a lane's slice is 4 elements or whole 8-element pieces");

    const int head = blockIdx.x, seq = blockIdx.y, H = gridDim.x;
    const int kv_head = head / group;
    const int ctx = context_lens[seq];
    const int* pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;

    extern __shared__ float smem[];
    float* q_smem = smem;               // [HEAD_SIZE]
    float* logits = smem + HEAD_SIZE;   // [ctx]
    __shared__ float red[kWarps];

    const scalar_t* q_row = q + (static_cast<size_t>(seq) * H + head) * HEAD_SIZE;
    for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) q_smem[d] = pa::to_float(q_row[d]) * scale;
    __syncthreads();

    const int group_idx = threadIdx.x / TGS;      // the group's first token; it then steps by kGroups
    const int lane_in_group = threadIdx.x % TGS;
    // The group's own TGS lanes. A full-warp mask (0xffffffff) here hangs or reads garbage
    // when ctx is not a multiple of kGroups: the 32/TGS groups of a warp leave the token
    // loop at different times, and a shuffle naming every lane waits for lanes that have
    // left. The lanes of one group always agree on whether to go round again.
    const unsigned group_mask = 0xffffffffu;  // every lane of the warp

    // 1. logits: TGS lanes, one token, one dot product, reduced across the group.
    float thread_max = -INFINITY;
    for (int t = group_idx; t < ctx; t += kGroups) {
        const int block = pages[t / block_size];
        // k_cache[block, kv_head, t % block_size, :]
        const scalar_t* k = k_cache + ((static_cast<size_t>(block) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE;
        float part[4] = {};  // four independent FMA chains
#pragma unroll
        for (int i = 0; i < kPieces; ++i) {
            const int d0 = (lane_in_group + i * TGS) * kPiece;  // piece c = lane_in_group + i*TGS
            float kf[kPiece];
#pragma unroll
            for (int e = 0; e < kPiece; ++e) kf[e] = pa::to_float(k[d0 + e]);  // scalar 2-byte loads
#pragma unroll
            for (int e = 0; e < kPiece; ++e) part[e % 4] += q_smem[d0 + e] * kf[e];
        }
        float dot = (part[0] + part[1]) + (part[2] + part[3]);
#pragma unroll
        for (int o = TGS / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(group_mask, dot, o);
        if (lane_in_group == 0) logits[t] = dot;  // every lane of the group has the sum
        thread_max = fmaxf(thread_max, dot);
    }
    const float m = block_reduce<true>(thread_max, red);  // its barrier also publishes logits[]

    // 2. softmax numerators and their sum.
    float thread_sum = 0.f;
    for (int t = threadIdx.x; t < ctx; t += kThreads) {
        const float e = __expf(logits[t] - m);
        logits[t] = e;
        thread_sum += e;
    }
    const float l = block_reduce<false>(thread_sum, red);  // its barrier also publishes logits[]
    const float inv_l = 1.f / l;

    // 3. out[d] = sum_t p_t v_t[d]: thread d reads v_t[d], so a warp reads 32 neighbours of one row.
    for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) {
        float acc = 0.f;
        for (int t = 0; t < ctx; ++t) {
            const int block = pages[t / block_size];
            // v_cache[block, kv_head, t % block_size, d]
            acc += logits[t] * pa::to_float(v_cache[((static_cast<size_t>(block) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE + d]);
        }
        out[(static_cast<size_t>(seq) * H + head) * HEAD_SIZE + d] = pa::from_float<scalar_t>(acc * inv_l);
    }
}

}  // namespace ex_fill
