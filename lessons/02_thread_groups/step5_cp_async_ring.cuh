// Lesson 02, step 5: K and V staged through a ring of cp.async tiles.
//
// What changed since step 4 (step4_online_softmax.cuh), and why: step 4 reads each K slice
// with a 16-byte register load, which holds its register until the data arrives, so the
// registers cap the bytes a CTA has in flight far below what DRAM latency needs once only
// one or two CTAs share an SM. Here every thread copies 16-byte pieces of a chunk's K tiles,
// then its V tiles, into a ring of kStages shared-memory tiles with cp.async (issue_tile in
// grouped_common.cuh), which holds no register: two 32 KiB tiles are on their way while the
// CTA computes on the third. The q.k and PV loops read the staged rows; the chunk's page ids
// are read once into shared memory; and a group now takes two tokens of a tile per step
// (two independent dot products per head). Rows are never copied past the sequence's end.
// The ring (102 KiB at D 128) does not fit a GPU with 99 KiB a CTA: why_not says so.
// Run: lesson02_thread_groups [--check | --bench] --variant cp_async_ring_tgs8
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "grouped_common.cuh"  // read_slice, issue_tile, chunk_softmax, the ring

namespace lesson02::step5 {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// Dynamic shared memory, in 4-byte words:
//   tiles   [kStages][kTile][D + 8] K or V elements (2 bytes each)
//   q       [HEADS_PER_CTA][HEAD_SIZE] floats, pre-scaled
//   logits  [HEADS_PER_CTA][chunk + 1] floats
//   pages   [chunk / 8] ints: the chunk's physical block ids (chunks start on a page)
__host__ __device__ constexpr int smem_words(int head_size, int group_max, int chunk) {
    return tile_words(head_size) + group_max * head_size + group_max * logits_stride(chunk) + chunk / 8;
}

// HEADS_PER_CTA: query heads one CTA serves. 1 = one CTA per query head (grid (H, B));
//   > 1 = one CTA per KV head (grid (Hkv, B)), heads >= group are idle (group 6 runs as 8).
// The q slices stay in registers when HEADS_PER_CTA * D / TGS <= 64 floats fit; past that
// (many heads, small groups) they are read from shared memory for every token.
template <class scalar_t, int HEAD_SIZE, int TGS, int HEADS_PER_CTA>
__global__ void __launch_bounds__(kThreads)
cp_async_ring_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
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
    constexpr int kRow = tile_row_elems(HEAD_SIZE);
    constexpr int kTile = tile_tokens(HEAD_SIZE);
    constexpr int kDims = (HEAD_SIZE + kThreads - 1) / kThreads;  // output dims a thread owns in PV

    const int seq = blockIdx.y;
    const int kv_head = HEADS_PER_CTA == 1 ? blockIdx.x / group : blockIdx.x;
    const int first_head = HEADS_PER_CTA == 1 ? blockIdx.x : blockIdx.x * group;
    const int num_heads = HEADS_PER_CTA == 1 ? 1 : group;   // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int block_shift = __ffs(block_size) - 1;  // block_size is 8, 16 or 32
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;

    extern __shared__ __align__(16) float smem[];
    scalar_t* tiles = reinterpret_cast<scalar_t*>(smem);                  // [kStages][kTile][kRow]
    float* q_smem = smem + tile_words(HEAD_SIZE);                         // [HEADS_PER_CTA][HEAD_SIZE]
    float* logits = q_smem + HEADS_PER_CTA * HEAD_SIZE;                       // [HEADS_PER_CTA][chunk + 1]
    const int stride = logits_stride(chunk);
    int* chunk_pages = reinterpret_cast<int*>(logits + HEADS_PER_CTA * stride);
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
    const int group_idx = threadIdx.x / TGS;        // which token of the tile this group takes
    const int lane_in_group = threadIdx.x % TGS;
    // The group's own lanes. A full-warp mask (0xffffffff) here hangs or reads garbage when
    // a tile's token count is not a multiple of kGroups: the warp's groups leave the token
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
        const int first_page = t0 / block_size;   // t0 is a multiple of 32, so of block_size
        const int num_pages = (chunk_len + block_size - 1) / block_size;
        for (int i = threadIdx.x; i < num_pages; i += kThreads) chunk_pages[i] = seq_pages[first_page + i];
        __syncthreads();

        // The chunk is streamed as K tiles 0 .. num_k_tiles-1, then V tiles: one sequence of
        // 2 * num_k_tiles tiles through the ring, so the first V tiles load during the last
        // K tiles and the softmax.
        const int num_k_tiles = (chunk_len + kTile - 1) / kTile;
        const int num_tiles = 2 * num_k_tiles;
#pragma unroll
        for (int s = 0; s < kStages - 1; ++s)
            issue_tile<scalar_t, HEAD_SIZE, kThreads>(tiles, s, num_k_tiles, chunk_len, k_cache, v_cache, chunk_pages, Hkv, kv_head, block_shift);

        for (int i = 0; i < num_tiles; ++i) {
            pa::cp_async_wait<kStages - 2>();
            __syncthreads();  // tile i is visible to all, and everyone is done with tile i-1's buffer
            issue_tile<scalar_t, HEAD_SIZE, kThreads>(tiles, i + kStages - 1, num_k_tiles, chunk_len, k_cache, v_cache, chunk_pages, Hkv,
                                            kv_head, block_shift);
            const scalar_t* buf = tiles + (i % kStages) * kTile * kRow;   // [kTile][kRow]
            const int tile0 = (i % num_k_tiles) * kTile;
            const int n = min(kTile, chunk_len - tile0);

            if (i < num_k_tiles) {
                // 1. logits[h][t] = q_h . k_t for every head of the CTA, one token per thread group,
                //    two tokens per step and four partial sums per dot product: a single chain
                //    of dependent FMAs would leave the SM waiting on arithmetic latency.
                for (int tt = group_idx; tt < n; tt += 2 * kGroups) {  // groups leave at different times
                    const bool second = tt + kGroups < n;               // the same for the group's lanes
                    float kf[2][ELEMS];
                    read_slice<scalar_t, ELEMS, TGS>(buf + tt * kRow, lane_in_group, kf[0]);
                    if (second) {
                        read_slice<scalar_t, ELEMS, TGS>(buf + (tt + kGroups) * kRow, lane_in_group, kf[1]);
                    } else {
#pragma unroll
                        for (int j = 0; j < ELEMS; ++j) kf[1][j] = 0.f;
                    }
#pragma unroll
                    for (int h = 0; h < HEADS_PER_CTA; ++h) {  // idle heads (h >= num_heads) have q = 0: harmless
                        float part[2][4] = {};
#pragma unroll
                        for (int j = 0; j < ELEMS; ++j) {
                            const float qj = kQInRegs ? q_frag[kQInRegs ? h : 0][kQInRegs ? j : 0]
                                                      : q_smem[h * HEAD_SIZE + slice_dim<ELEMS, TGS>(lane_in_group, j)];
                            part[0][j % 4] += qj * kf[0][j];
                            part[1][j % 4] += qj * kf[1][j];  // 0 when !second, and never stored
                        }
                        float dot0 = (part[0][0] + part[0][1]) + (part[0][2] + part[0][3]);
                        float dot1 = (part[1][0] + part[1][1]) + (part[1][2] + part[1][3]);
#pragma unroll
                        for (int o = TGS / 2; o > 0; o >>= 1) {
                            dot0 += __shfl_xor_sync(group_mask, dot0, o);
                            dot1 += __shfl_xor_sync(group_mask, dot1, o);
                        }
                        if (lane_in_group == h % TGS) {  // spread the stores over the lanes
                            logits[h * stride + tile0 + tt] = dot0;
                            if (second) logits[h * stride + tile0 + tt + kGroups] = dot1;
                        }
                    }
                }
                continue;
            }

            if (i == num_k_tiles) {
                // 2. All logits of the chunk are written (the barrier above): softmax step.
                chunk_softmax<HEADS_PER_CTA, kWarps>(logits, stride, chunk_len, num_heads, m_run, l_run, alpha, red_max, red_sum);
                __syncthreads();
#pragma unroll
                for (int h = 0; h < HEADS_PER_CTA; ++h) {
                    const float a = h < num_heads ? alpha[h] : 0.f;
#pragma unroll
                    for (int k = 0; k < kDims; ++k) acc[k][h] *= a;
                }
            }

            // 3. acc += p_t v_t over the tile: thread d reads v_t[d] of the staged row once for every head.
            for (int tt = 0; tt < n; ++tt) {
#pragma unroll
                for (int k = 0; k < kDims; ++k) {
                    const int d = threadIdx.x + k * kThreads;
                    if (d >= HEAD_SIZE) break;
                    const float v = pa::to_float(buf[tt * kRow + d]);
#pragma unroll
                    for (int h = 0; h < HEADS_PER_CTA; ++h) {
                        if (h >= num_heads) break;
                        acc[k][h] += logits[h * stride + tile0 + tt] * v;
                    }
                }
            }
        }
        pa::cp_async_wait<0>();  // only empty groups can be left, but leave none behind
        __syncthreads();         // logits, tiles and chunk_pages are rewritten by the next chunk
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

}  // namespace lesson02::step5
