// Lesson 01, exercise 2 (extension), a reference solution: the sliding-window mask.
// Teachers may delete solution/ before handing the exercise folder out; the grader does not need it.
//
// Only the last `window` tokens of each context attend (Mistral's and Gemma's local layers):
// tokens first .. ctx-1 with first = max(0, ctx - window). The other tokens are skipped, not
// masked with -inf: their K and V rows are never loaded, so a short window also reads less.
#pragma once

#include <cuda_runtime.h>

#include "device_math.cuh"

namespace ex_window {

constexpr int kThreads = 128;  // the grader launches this many threads per CTA
constexpr int kWarps = kThreads / 32;

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

template <class scalar_t, int HEAD_SIZE>
__global__ void __launch_bounds__(kThreads)
decode_kernel(scalar_t* __restrict__ out,                // [B, H, D]
              const scalar_t* __restrict__ q,            // [B, H, D]
              const scalar_t* __restrict__ k_cache,      // [num_blocks, Hkv, block_size, D]
              const scalar_t* __restrict__ v_cache,      // [num_blocks, Hkv, block_size, D]
              const int* __restrict__ block_table,       // [B, max_blocks_per_seq]
              const int* __restrict__ context_lens,      // [B]
              int Hkv, int group, int block_size, int max_blocks_per_seq, float scale,
              int window) {                              // >= 1; >= ctx is full attention
    const int head = blockIdx.x, seq = blockIdx.y, H = gridDim.x;
    const int kv_head = head / group;
    const int ctx = context_lens[seq];
    const int* pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int first = ctx > window ? ctx - window : 0;  // the first token that attends

    extern __shared__ float smem[];
    float* q_smem = smem;               // [HEAD_SIZE]
    float* logits = smem + HEAD_SIZE;   // [ctx]: entries first .. ctx-1 are used
    __shared__ float red[kWarps];

    const scalar_t* q_row = q + (static_cast<size_t>(seq) * H + head) * HEAD_SIZE;
    for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) q_smem[d] = pa::to_float(q_row[d]) * scale;
    __syncthreads();

    // 1. logits of the window's tokens: one thread, one token, one whole dot product.
    float thread_max = -INFINITY;
    for (int t = first + threadIdx.x; t < ctx; t += kThreads) {
        const int block = pages[t / block_size];
        // k_cache[block, kv_head, t % block_size, :]
        const scalar_t* k = k_cache + ((static_cast<size_t>(block) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE;
        float dot = 0.f;
#pragma unroll 8
        for (int d = 0; d < HEAD_SIZE; ++d) dot += q_smem[d] * pa::to_float(k[d]);
        logits[t] = dot;
        thread_max = fmaxf(thread_max, dot);
    }
    const float m = block_reduce<true>(thread_max, red);

    // 2. softmax numerators and their sum, over the window.
    float thread_sum = 0.f;
    for (int t = first + threadIdx.x; t < ctx; t += kThreads) {
        const float e = __expf(logits[t] - m);
        logits[t] = e;
        thread_sum += e;
    }
    const float l = block_reduce<false>(thread_sum, red);  // its barrier also publishes logits[]
    const float inv_l = 1.f / l;

    // 3. out[d] = sum over the window of p_t v_t[d].
    for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) {
        float acc = 0.f;
        // counted from 0, as the lesson's loop: starting the counter at `first` makes nvcc unroll
        // this loop less (32 registers instead of 40, sm_90a), and the kernel slower
        for (int i = 0; i < ctx - first; ++i) {
            const int t = first + i;
            const int block = pages[t / block_size];
            // v_cache[block, kv_head, t % block_size, d]
            acc += logits[t] * pa::to_float(v_cache[((static_cast<size_t>(block) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE + d]);
        }
        out[(static_cast<size_t>(seq) * H + head) * HEAD_SIZE + d] = pa::from_float<scalar_t>(acc * inv_l);
    }
}

}  // namespace ex_window
