// Lesson 01, exercise 1 (fill-in): the block softmax of the naive decode.
//
// THIS is the file you edit (the rest of exercise/ is the grader). It is lesson 01's kernel
// (naive_decode.cuh) with its block-wide max and sum cut out: one CTA of 128 threads handles
// one (query head, sequence); each thread holds the logits of tokens tid, tid + 128, ...; the
// softmax needs the max and the sum over ALL of them, so every thread must learn both.
//
//   TODO(1)  the block-wide max of thread_max           about 10 lines (a helper above the kernel)
//   TODO(2)  the block-wide sum of thread_sum           about 1 line if TODO(1)'s helper does both
//
// Grade it: lesson01_exercise --grade   (hints: exercise/hints/fill/1.md, 2.md, 3.md)
// Keep the kernel's name, template parameters and arguments: the grader launches it with
// grid (H, B), 128 threads and the lesson's dynamic shared memory (q, then one float per token).
#pragma once

#include <cuda_runtime.h>

#include "device_math.cuh"

namespace ex_fill {

constexpr int kThreads = 128;  // the grader launches this many threads per CTA
constexpr int kWarps = kThreads / 32;

template <class scalar_t, int HEAD_SIZE>
__global__ void __launch_bounds__(kThreads)
decode_kernel(scalar_t* __restrict__ out,                // [B, H, D]
              const scalar_t* __restrict__ q,            // [B, H, D]
              const scalar_t* __restrict__ k_cache,      // [num_blocks, Hkv, block_size, D]
              const scalar_t* __restrict__ v_cache,      // [num_blocks, Hkv, block_size, D]
              const int* __restrict__ block_table,       // [B, max_blocks_per_seq]
              const int* __restrict__ context_lens,      // [B]
              int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
    const int head = blockIdx.x, seq = blockIdx.y, H = gridDim.x;
    const int kv_head = head / group;
    const int ctx = context_lens[seq];
    const int* pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;

    extern __shared__ float smem[];
    float* q_smem = smem;               // [HEAD_SIZE]
    float* logits = smem + HEAD_SIZE;   // [ctx]

    const scalar_t* q_row = q + (static_cast<size_t>(seq) * H + head) * HEAD_SIZE;
    for (int d = threadIdx.x; d < HEAD_SIZE; d += kThreads) q_smem[d] = pa::to_float(q_row[d]) * scale;
    __syncthreads();

    // 1. logits: one thread, one token, one whole dot product.
    float thread_max = -INFINITY;
    for (int t = threadIdx.x; t < ctx; t += kThreads) {
        const int block = pages[t / block_size];
        // k_cache[block, kv_head, t % block_size, :]
        const scalar_t* k = k_cache + ((static_cast<size_t>(block) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE;
        float dot = 0.f;
#pragma unroll 8
        for (int d = 0; d < HEAD_SIZE; ++d) dot += q_smem[d] * pa::to_float(k[d]);
        logits[t] = dot;
        thread_max = fmaxf(thread_max, dot);
    }

    // TODO(1): m = the max of thread_max over all 128 threads, known to every thread.
    // (about 10 lines: reduce within each warp, then across the kWarps warps through shared memory)
    const float m = thread_max;

    // 2. softmax numerators and their sum.
    float thread_sum = 0.f;
    for (int t = threadIdx.x; t < ctx; t += kThreads) {
        const float e = __expf(logits[t] - m);
        logits[t] = e;
        thread_sum += e;
    }

    // TODO(2): l = the sum of thread_sum over all 128 threads, known to every thread; step 3 below
    // reads every thread's logits[], so they must be visible to all threads by then.
    // (about 1 line with a helper from TODO(1) that can sum as well as take the max)
    const float l = thread_sum;
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
