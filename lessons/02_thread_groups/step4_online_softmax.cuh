// Lesson 02, step 4: the online softmax, so that any context fits.
//
// What changed since step 3 (step3_grouped_logits.cuh), and why: step 3 keeps every head's
// logits of the whole context in shared memory, `group` times step 2's, and refuses a context
// whose logits do not fit. Here the context is walked in chunks (chunk tokens, sized so that
// one chunk's logits of every head take at most 32 KiB) with a running max m and sum l per
// head: chunk_softmax (grouped_common.cuh) turns the chunk's logits into p = exp(logit - m_new)
// and keeps alpha = exp(m_old - m_new), by which the output accumulated over the earlier
// chunks is rescaled before the chunk's PV adds to it. With one chunk this is step 3.
// Run: lesson02_thread_groups [--check | --bench] --variant online_softmax_tgs8
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "grouped_common.cuh"  // read_slice, chunk_softmax

namespace lesson02::step4 {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// Dynamic shared memory, in 4-byte words:
//   q       [HEADS_PER_CTA][HEAD_SIZE] floats, pre-scaled
//   logits  [HEADS_PER_CTA][chunk + 1] floats
__host__ __device__ constexpr int smem_words(int head_size, int group_max, int chunk) {
    return group_max * head_size + group_max * logits_stride(chunk);
}

// HEADS_PER_CTA: query heads one CTA serves. 1 = one CTA per query head (grid (H, B));
//   > 1 = one CTA per KV head (grid (Hkv, B)), heads >= group are idle (group 6 runs as 8).
// The q slices stay in registers when HEADS_PER_CTA * D / TGS <= 64 floats fit; past that
// (many heads, small groups) they are read from shared memory for every token.
template <class scalar_t, int HEAD_SIZE, int TGS, int HEADS_PER_CTA>
__global__ void __launch_bounds__(kThreads)
online_softmax_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                           const scalar_t* __restrict__ q,         // [B, H, D]
                           const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                           const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                           const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                           const int* __restrict__ context_lens,   // [B]
                           int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale,
                           int chunk) {
    static_assert(TGS == 4 || TGS == 8 || TGS == 16, "THREAD_GROUP_SIZE is 4, 8 or 16");
    constexpr int ELEMS = HEAD_SIZE / TGS;               // q and K elements per lane
    constexpr int kGroups = kThreads / TGS;              // tokens of a tile taken at once
    constexpr bool kQInRegs = HEADS_PER_CTA * ELEMS <= 64;
    constexpr int kDims = (HEAD_SIZE + kThreads - 1) / kThreads;  // output dims a thread owns in PV

    const int seq = blockIdx.y;
    const int kv_head = HEADS_PER_CTA == 1 ? blockIdx.x / group : blockIdx.x;
    const int first_head = HEADS_PER_CTA == 1 ? blockIdx.x : blockIdx.x * group;
    const int num_heads = HEADS_PER_CTA == 1 ? 1 : group;   // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;

    extern __shared__ __align__(16) float smem[];
    float* q_smem = smem;                                                 // [HEADS_PER_CTA][HEAD_SIZE]
    float* logits = q_smem + HEADS_PER_CTA * HEAD_SIZE;                       // [HEADS_PER_CTA][chunk + 1]
    const int stride = logits_stride(chunk);
    __shared__ float m_run[HEADS_PER_CTA], l_run[HEADS_PER_CTA], alpha[HEADS_PER_CTA];  // running softmax state per head
    __shared__ float red_max[kWarps], red_sum[kWarps];

    for (int i = threadIdx.x; i < HEADS_PER_CTA * HEAD_SIZE; i += kThreads) {
        const int h = i / HEAD_SIZE, d = i % HEAD_SIZE;
        q_smem[i] = h < num_heads ? pa::to_float(q[(static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + d]) * scale : 0.f;
    }
    if (threadIdx.x < HEADS_PER_CTA) {
        m_run[threadIdx.x] = -INFINITY;
        l_run[threadIdx.x] = 0.f;
    }
    __syncthreads();

    const int lane = threadIdx.x % 32;
    const int group_idx = threadIdx.x / TGS;        // the group's first token of a chunk; it then steps by kGroups
    const int lane_in_group = threadIdx.x % TGS;
    // The group's own lanes. A full-warp mask (0xffffffff) here hangs or reads garbage when
    // a chunk's token count is not a multiple of kGroups: the warp's groups leave the token
    // loop at different times, and a shuffle waits for lanes that will never arrive.
    const unsigned group_mask = ((1u << TGS) - 1u) << (lane / TGS * TGS);

    float q_frag[kQInRegs ? HEADS_PER_CTA : 1][kQInRegs ? ELEMS : 1];
    if constexpr (kQInRegs) {
#pragma unroll
        for (int h = 0; h < HEADS_PER_CTA; ++h)
#pragma unroll
            for (int j = 0; j < ELEMS; ++j) q_frag[h][j] = q_smem[h * HEAD_SIZE + slice_dim<ELEMS, TGS>(lane_in_group, j)];
    }

    // PV ownership: thread d owns output dim d (and d + kThreads at D 256) of every head.
    float acc[kDims][HEADS_PER_CTA];
#pragma unroll
    for (int k = 0; k < kDims; ++k)
#pragma unroll
        for (int h = 0; h < HEADS_PER_CTA; ++h) acc[k][h] = 0.f;

    for (int t0 = 0; t0 < ctx; t0 += chunk) {
        const int chunk_len = min(chunk, ctx - t0);

        // 1. logits[h][tt] = q_h . k_t (t = t0 + tt) for every head of the CTA, one token per
        //    thread group: the group's K slice, one read, serves every head.
        for (int tt = group_idx; tt < chunk_len; tt += kGroups) {  // groups leave at different times
            const int t = t0 + tt;
            // k_cache[block, kv_head, t % block_size, :]
            const scalar_t* k_row = k_cache + ((static_cast<size_t>(seq_pages[t / block_size]) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE;
            float kf[ELEMS];
            read_slice<scalar_t, ELEMS, TGS>(k_row, lane_in_group, kf);
#pragma unroll
            for (int h = 0; h < HEADS_PER_CTA; ++h) {  // idle heads (h >= num_heads) have q = 0: harmless
                float part[4] = {};  // four independent FMA chains
#pragma unroll
                for (int j = 0; j < ELEMS; ++j) {
                    const float qj = kQInRegs ? q_frag[kQInRegs ? h : 0][kQInRegs ? j : 0]
                                              : q_smem[h * HEAD_SIZE + slice_dim<ELEMS, TGS>(lane_in_group, j)];
                    part[j % 4] += qj * kf[j];
                }
                float dot = (part[0] + part[1]) + (part[2] + part[3]);
#pragma unroll
                for (int o = TGS / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(group_mask, dot, o);
                if (lane_in_group == h % TGS) logits[h * stride + tt] = dot;  // spread the stores over the lanes
            }
        }
        __syncthreads();  // every logit of the chunk is written

        // 2. The softmax step: new running max and sum per head; what was accumulated is rescaled.
        chunk_softmax<HEADS_PER_CTA, kWarps>(logits, stride, chunk_len, num_heads, m_run, l_run, alpha, red_max, red_sum);
        __syncthreads();
#pragma unroll
        for (int h = 0; h < HEADS_PER_CTA; ++h) {
            const float a = h < num_heads ? alpha[h] : 0.f;
#pragma unroll
            for (int k = 0; k < kDims; ++k) acc[k][h] *= a;
        }

        // 3. acc += p_t v_t over the chunk: thread d reads v_t[d] once for every head.
        for (int tt = 0; tt < chunk_len; ++tt) {
            const int t = t0 + tt;
            // v_cache[block, kv_head, t % block_size, :]
            const scalar_t* v_row = v_cache + ((static_cast<size_t>(seq_pages[t / block_size]) * Hkv + kv_head) * block_size + t % block_size) * HEAD_SIZE;
#pragma unroll
            for (int k = 0; k < kDims; ++k) {
                const int d = threadIdx.x + k * kThreads;
                if (d >= HEAD_SIZE) break;
                const float v = pa::to_float(v_row[d]);
#pragma unroll
                for (int h = 0; h < HEADS_PER_CTA; ++h) {
                    if (h >= num_heads) break;
                    acc[k][h] += logits[h * stride + tt] * v;
                }
            }
        }
        __syncthreads();  // the logits are rewritten by the next chunk
    }

    // 4. Divide by the running sum and store out[seq, first_head + h, d].
#pragma unroll
    for (int k = 0; k < kDims; ++k) {
        const int d = threadIdx.x + k * kThreads;
        if (d >= HEAD_SIZE) break;
#pragma unroll
        for (int h = 0; h < HEADS_PER_CTA; ++h) {
            if (h >= num_heads) break;
            out[(static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + d] = pa::from_float<scalar_t>(acc[k][h] / l_run[h]);
        }
    }
}

}  // namespace lesson02::step4
