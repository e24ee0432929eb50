// Lesson 02, step 6: V read 16 bytes at a time by its owners, and 256 threads a CTA.
//
// What changed since step 5 (step5_cp_async_ring.cuh), and why: the PV step. In step 5 thread
// d reads one 2-byte element v_t[d] of each staged V row and adds it into every head's output:
// many tiny shared-memory reads, and at D 64 half the threads idle. Here a thread owns one
// 16-byte vector (8 dims) of a few heads (PvLayout): each V read brings 8 dims that serve every
// head it owns, heads beyond that go to other head groups, and the remaining threads split the
// tile's tokens into token lanes whose partial sums are added once, at the end, through the
// logits' shared memory. With 8 accumulators per head a thread, the CTA can afford 256 threads
// (kThreads, grouped_common.cuh): with the ring leaving room for one or two CTAs per SM, 128
// threads left most of the SM idle.
// The same kernel with HEADS_PER_CTA = 1 is the per-head mapping (grid (H, B)) with the
// ring: variants per_head_tgs{4,8,16}; the grouped mapping is grouped_tgs{4,8,16}.
// Run: lesson02_thread_groups [--check | --bench] [--shape NAME] --variant grouped_tgs8 (per_head_tgs8: one query head a CTA)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "grouped_common.cuh"  // read_slice, issue_tile, chunk_softmax, the ring

namespace lesson02 {

// How the PV step spreads a CTA's 256 threads. A thread owns one 16-byte vector (8 dims)
// of a few heads, so each V read serves every head the thread owns; when a CTA has more
// heads they are split over head groups (more accumulators would spill registers). The
// remaining threads split the tile's tokens into token lanes.
template <int HEAD_SIZE, int HEADS_PER_CTA>
struct PvLayout {
    static constexpr int kVecsPerRow = HEAD_SIZE / 8;               // 8, 16 or 32
    // Up to 2 heads for groups up to 4, else 4 (32 accumulators), or more when the threads
    // run out (D 256 with 32 heads: 8).
    static constexpr int kMinHeads = HEADS_PER_CTA * kVecsPerRow / kThreads;
    static constexpr int kHeadsPerThread = HEADS_PER_CTA <= 4 ? (HEADS_PER_CTA < 2 ? HEADS_PER_CTA : 2) : (kMinHeads > 4 ? kMinHeads : 4);
    static constexpr int kHeadGroups = HEADS_PER_CTA / kHeadsPerThread;
    static constexpr int kTokenLanes = kThreads / (kVecsPerRow * kHeadGroups);
    static_assert(kTokenLanes >= 1 && kVecsPerRow * kHeadGroups * kTokenLanes == kThreads, "PV layout must use every thread");
    static_assert(kHeadsPerThread * kHeadGroups == HEADS_PER_CTA, "HEADS_PER_CTA must be a power of two");
};

// Dynamic shared memory, in 4-byte words:
//   tiles   [kStages][kTile][D + 8] K or V elements (2 bytes each)
//   q       [HEADS_PER_CTA][HEAD_SIZE] floats, pre-scaled
//   logits  [HEADS_PER_CTA][chunk + 1] floats (the +1 staggers the rows across banks); at the
//           end the token lanes' PV partials [token_lanes][HEADS_PER_CTA][HEAD_SIZE] reuse it
//   pages   [chunk / 8] ints: the chunk's physical block ids (chunks start on a page)
__host__ __device__ constexpr int body_words(int head_size, int group_max, int chunk, int token_lanes) {
    const int logits = group_max * logits_stride(chunk);
    const int pv_partials = token_lanes > 1 ? token_lanes * group_max * head_size : 0;
    return logits > pv_partials ? logits : pv_partials;
}
__host__ __device__ constexpr int smem_words(int head_size, int group_max, int chunk, int token_lanes) {
    return tile_words(head_size) + group_max * head_size + body_words(head_size, group_max, chunk, token_lanes) + chunk / 8;
}

// HEADS_PER_CTA: query heads one CTA serves. 1 = one CTA per query head (grid (H, B));
//   > 1 = one CTA per KV head (grid (Hkv, B)), heads >= group are idle (group 6 runs as 8).
// The q slices stay in registers when HEADS_PER_CTA * D / TGS <= 64 floats fit; past that
// (many heads, small groups) they are read from shared memory for every token.
template <class scalar_t, int HEAD_SIZE, int TGS, int HEADS_PER_CTA>
__global__ void __launch_bounds__(kThreads, HEADS_PER_CTA == 1 ? 2 : 1)
grouped_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
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
    using Pv = PvLayout<HEAD_SIZE, HEADS_PER_CTA>;

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
    int* chunk_pages = reinterpret_cast<int*>(logits + body_words(HEAD_SIZE, HEADS_PER_CTA, chunk, Pv::kTokenLanes));
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

    // PV ownership: 8 dims (one 16-byte vector) of heads_per_thread heads, tokens split by lane.
    const int pv_vec = threadIdx.x % Pv::kVecsPerRow;
    const int pv_head_group = threadIdx.x / Pv::kVecsPerRow % Pv::kHeadGroups;
    const int pv_token_lane = threadIdx.x / (Pv::kVecsPerRow * Pv::kHeadGroups);
    float acc[Pv::kHeadsPerThread][8];
#pragma unroll
    for (int j = 0; j < Pv::kHeadsPerThread; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j][e] = 0.f;

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
            issue_tile<scalar_t, HEAD_SIZE>(tiles, s, num_k_tiles, chunk_len, k_cache, v_cache, chunk_pages, Hkv, kv_head, block_shift);

        for (int i = 0; i < num_tiles; ++i) {
            pa::cp_async_wait<kStages - 2>();
            __syncthreads();  // tile i is visible to all, and everyone is done with tile i-1's buffer
            issue_tile<scalar_t, HEAD_SIZE>(tiles, i + kStages - 1, num_k_tiles, chunk_len, k_cache, v_cache, chunk_pages, Hkv,
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
                chunk_softmax<HEADS_PER_CTA>(logits, stride, chunk_len, num_heads, m_run, l_run, alpha, red_max, red_sum);
                __syncthreads();
#pragma unroll
                for (int j = 0; j < Pv::kHeadsPerThread; ++j) {
                    const int h = pv_head_group * Pv::kHeadsPerThread + j;
                    const float a = h < num_heads ? alpha[h] : 0.f;
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[j][e] *= a;
                }
            }

            // 3. acc += p_t v_t over the tile, one 16-byte vector of the staged V row a token.
#pragma unroll 2
            for (int tt = pv_token_lane; tt < n; tt += Pv::kTokenLanes) {
                float v[8];
                pa::load8(buf + tt * kRow + pv_vec * 8, v);
#pragma unroll
                for (int j = 0; j < Pv::kHeadsPerThread; ++j) {
                    const int h = pv_head_group * Pv::kHeadsPerThread + j;
                    if (h >= num_heads) break;
                    const float p = logits[h * stride + tile0 + tt];
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[j][e] += p * v[e];
                }
            }
        }
        pa::cp_async_wait<0>();  // only empty groups can be left, but leave none behind
        __syncthreads();         // logits, tiles and chunk_pages are rewritten by the next chunk
    }

    // 4. Token lanes add up (through shared memory), divide by the running sum, store 16 bytes.
    if constexpr (Pv::kTokenLanes > 1) {
        float* partials = logits;  // [token_lanes][HEADS_PER_CTA][HEAD_SIZE], logits are dead now
#pragma unroll
        for (int j = 0; j < Pv::kHeadsPerThread; ++j) {
            const int h = pv_head_group * Pv::kHeadsPerThread + j;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                partials[(pv_token_lane * HEADS_PER_CTA + h) * HEAD_SIZE + pv_vec * 8 + e] = acc[j][e];
        }
        __syncthreads();
        if (pv_token_lane == 0) {
#pragma unroll
            for (int j = 0; j < Pv::kHeadsPerThread; ++j) {
                const int h = pv_head_group * Pv::kHeadsPerThread + j;
                // Not unrolled: with every token lane's loads hoisted, ptxas ran out of
                // registers and spilled (over 1 KB at D 64); this runs once per CTA.
#pragma unroll 1
                for (int lane_t = 1; lane_t < Pv::kTokenLanes; ++lane_t)
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[j][e] += partials[(lane_t * HEADS_PER_CTA + h) * HEAD_SIZE + pv_vec * 8 + e];
            }
        }
    }
    if (pv_token_lane == 0) {
#pragma unroll
        for (int j = 0; j < Pv::kHeadsPerThread; ++j) {
            const int h = pv_head_group * Pv::kHeadsPerThread + j;
            if (h >= num_heads) break;
            const float inv_l = 1.f / l_run[h];
            float o[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) o[e] = acc[j][e] * inv_l;
            // out[seq, first_head + h, pv_vec * 8 .. + 8]
            pa::store8(out + (static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + pv_vec * 8, o);
        }
    }
}

}  // namespace lesson02
