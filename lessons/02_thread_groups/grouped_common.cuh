// Lesson 02: what the grouped CTA's steps share (steps 3 to 6; steps 7 and up, and lesson 03,
// use tile_tokens, tile_row_elems and chunk_softmax): a lane's slice of a K row, the softmax
// step of one chunk of logits, and the cp.async ring's tiles. Each helper is introduced by the
// step that first needs it: read_slice and chunk_softmax by step 3, the chunk geometry by
// step 4, the ring (kStages, tile_tokens, tile_words, issue_tile) by step 5.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"

namespace lesson02 {

// The grouped CTA from step 6 on: 256 threads, 8 warps (steps 3 to 5 run 128 threads, and
// name their own kThreads).
constexpr int kThreads = 256;    // 8 warps: with one or two CTAs per SM, fewer leave the SM idle
constexpr int kWarps = kThreads / 32;
constexpr int kChunkAlign = 32;  // chunks start on a page boundary for every page size (8/16/32)
constexpr int kStages = 3;       // tiles in the ring: one being read, two in flight

// Tokens per cp.async tile: 32 KiB tiles (34 with padding) at D 64 and 128, 33 at D 256.
__host__ __device__ constexpr int tile_tokens(int head_size) { return head_size == 256 ? 64 : 128; }

// A staged K or V row is padded by 16 bytes, so that thread groups reading different rows
// at the same offset fall on different shared-memory banks.
__host__ __device__ constexpr int tile_row_elems(int head_size) { return head_size + 8; }

// The ring, in 4-byte words: [kStages][tile_tokens][D + 8] K or V elements (2 bytes each).
__host__ __device__ constexpr int tile_words(int head_size) {
    return kStages * tile_tokens(head_size) * tile_row_elems(head_size) / 2;
}
// A row of logits: one float per token of a chunk, +1 to stagger the rows across banks.
__host__ __device__ constexpr int logits_stride(int chunk) { return chunk + 1; }

// A K row slice of ELEMS elements for lane `lane` of a group: 16-byte pieces c = lane + i*TGS
// (8 elements each), so one read of a group covers TGS*16 contiguous bytes. With 4 elements
// per lane (D 64, TGS 16) the pieces are 8 bytes.
template <int ELEMS>
struct SliceShape {
    static constexpr int kPiece = ELEMS >= 8 ? 8 : ELEMS;
    static constexpr int kPieces = ELEMS / kPiece;
    static_assert(kPiece == 8 || kPiece == 4, "a lane's slice must be 4 or a multiple of 8 elements");
};

// Reads a lane's slice of a staged K row into floats, 16 (8) bytes at a time.
template <class scalar_t, int ELEMS, int TGS>
__device__ __forceinline__ void read_slice(const scalar_t* row, int lane_in_group, float (&f)[ELEMS]) {
    using S = SliceShape<ELEMS>;
#pragma unroll
    for (int i = 0; i < S::kPieces; ++i) {
        const scalar_t* p = row + (lane_in_group + i * TGS) * S::kPiece;
        if constexpr (S::kPiece == 8) {
            float v[8];
            pa::load8(p, v);
#pragma unroll
            for (int e = 0; e < 8; ++e) f[i * 8 + e] = v[e];
        } else {
            float v[4];
            pa::load4(p, v);
#pragma unroll
            for (int e = 0; e < 4; ++e) f[i * 4 + e] = v[e];
        }
    }
}

// The element index of slice element j of lane `lane_in_group` (the inverse of read_slice).
template <int ELEMS, int TGS>
__device__ __forceinline__ int slice_dim(int lane_in_group, int j) {
    using S = SliceShape<ELEMS>;
    return (lane_in_group + (j / S::kPiece) * TGS) * S::kPiece + j % S::kPiece;
}

// Starts the copy of tile i of a chunk (K tiles first, then V tiles) into its ring slot,
// 16 bytes per cp.async, and commits a group: every thread commits one per tile, empty or
// not, so that wait<kStages - 2> always means "the tile about to be read has landed".
template <class scalar_t, int HEAD_SIZE, int THREADS = kThreads>
__device__ __forceinline__ void issue_tile(scalar_t* tiles, int i, int num_k_tiles, int chunk_len,
                                           const scalar_t* __restrict__ k_cache, const scalar_t* __restrict__ v_cache,
                                           const int* chunk_pages, int Hkv, int kv_head, int block_shift) {
    constexpr int kRow = tile_row_elems(HEAD_SIZE);
    constexpr int kTile = tile_tokens(HEAD_SIZE);
    constexpr int kPiecesPerRow = HEAD_SIZE / 8;  // 16-byte pieces in a K or V row
    if (i < 2 * num_k_tiles) {
        const scalar_t* cache = i < num_k_tiles ? k_cache : v_cache;
        const int tile0 = (i % num_k_tiles) * kTile;
        scalar_t* buf = tiles + (i % kStages) * kTile * kRow;  // [kTile][kRow]
        for (int p = threadIdx.x; p < kTile * kPiecesPerRow; p += THREADS) {
            const int tt = p / kPiecesPerRow, piece = p % kPiecesPerRow;
            const int t = tile0 + tt;
            if (t < chunk_len) {  // never a slot past the sequence's end (those hold NaN in tests)
                // cache[block, kv_head, t % block_size, piece * 8 .. + 8] (block sizes are powers of two)
                const int block_size = 1 << block_shift;
                const scalar_t* src = cache + ((static_cast<size_t>(chunk_pages[t >> block_shift]) * Hkv + kv_head) * block_size +
                                               (t & (block_size - 1))) * HEAD_SIZE + piece * 8;
                pa::cp_async16(buf + tt * kRow + piece * 8, src);
            }
        }
    }
    pa::cp_async_commit();
}

// The softmax step of one chunk, once all its logits are in shared memory:
//   logits [HEADS_PER_CTA][stride] floats; row h, tokens 0 .. chunk_len-1, becomes p = exp(logit - m_new)
// Per head: chunk max, new running max m_new, rescale factor alpha = exp(m_old - m_new) for
// what was accumulated before, running sum l. Fewer heads than warps: several warps share
// a head's tokens. Every thread of the CTA (WARPS warps) calls it; red_max and red_sum
// hold WARPS floats; the caller syncs before reading alpha.
// `warp`: the calling warp's index among the WARPS (step 14 runs two sets of warps in a CTA).
template <int HEADS_PER_CTA, int WARPS = kWarps>
__device__ __forceinline__ void chunk_softmax(float* logits, int stride, int chunk_len, int num_heads, float* m_run,
                                              float* l_run, float* alpha, float* red_max, float* red_sum, int warp) {
    const int lane = threadIdx.x % 32;
    constexpr int kWarpsPerHead = HEADS_PER_CTA >= WARPS ? 1 : WARPS / HEADS_PER_CTA;
    constexpr int kHeadsPerPass = WARPS / kWarpsPerHead;
    const int part = warp % kWarpsPerHead;
    for (int h0 = 0; h0 < num_heads; h0 += kHeadsPerPass) {  // one pass when kWarpsPerHead > 1
        const int h = h0 + warp / kWarpsPerHead;
        const bool active = h < num_heads;
        float* row = logits + h * stride;
        const float m_old = active ? m_run[h] : 0.f;
        float cmax = -INFINITY;
        if (active)
            for (int t = part * 32 + lane; t < chunk_len; t += 32 * kWarpsPerHead) cmax = fmaxf(cmax, row[t]);
        cmax = pa::warp_max(cmax);
        if constexpr (kWarpsPerHead > 1) {
            if (lane == 0) red_max[warp] = cmax;
            __syncthreads();
            for (int w = warp - part; w < warp - part + kWarpsPerHead; ++w) cmax = fmaxf(cmax, red_max[w]);
        }
        const float m_new = fmaxf(m_old, cmax);
        float sum = 0.f;
        if (active)
            for (int t = part * 32 + lane; t < chunk_len; t += 32 * kWarpsPerHead) {
                const float p = __expf(row[t] - m_new);
                row[t] = p;
                sum += p;
            }
        sum = pa::warp_sum(sum);
        if constexpr (kWarpsPerHead > 1) {
            if (lane == 0) red_sum[warp] = sum;
            __syncthreads();  // every warp of the head has read m_run[h] before it changes
            sum = 0.f;
            for (int w = warp - part; w < warp - part + kWarpsPerHead; ++w) sum += red_sum[w];
        }
        __syncwarp();  // every lane has read m_run[h] (m_old) before lane 0 changes it
        if (active && part == 0 && lane == 0) {
            const float a = __expf(m_old - m_new);  // 0 on the first chunk (m_old = -inf)
            alpha[h] = a;
            l_run[h] = l_run[h] * a + sum;
            m_run[h] = m_new;
        }
    }
}
template <int HEADS_PER_CTA, int WARPS = kWarps>
__device__ __forceinline__ void chunk_softmax(float* logits, int stride, int chunk_len, int num_heads, float* m_run,
                                              float* l_run, float* alpha, float* red_max, float* red_sum) {
    chunk_softmax<HEADS_PER_CTA, WARPS>(logits, stride, chunk_len, num_heads, m_run, l_run, alpha, red_max, red_sum,
                                        static_cast<int>(threadIdx.x / 32));
}

}  // namespace lesson02
