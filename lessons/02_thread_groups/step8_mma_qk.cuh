// Lesson 02, step 8: the q.K products on tensor cores (mma.sync), one 16-token x 8-head block per warp and step.
//
// What changed since step 7 (step7_tile_stream.cuh), and why: the logits of a token tile are
// one small GEMM, logits[token][head] = K_tile[token][:] . q[head][:], and one warp
// instruction, mma.sync.m16n8k16, does a 16 x 8 x 16 block of it from ldmatrix loads of the
// staged K rows (A) and the q rows (B, kept as 2-byte elements). The CTA's heads become mma
// columns: the group is rounded up to 8, 16 or 32 (idle columns cost tensor-core time this
// kernel has plenty of), and the zeroed rows past the end keep a block's NaN-free. The PV
// step is still step 7's, on CUDA cores; step 9 moves it too.
// Run: lesson02_thread_groups [--check | --bench] --variant grouped_mma_qk
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "mma.cuh"
#include "grouped_common.cuh"  // chunk_softmax, read_slice, tile_row_elems
#include "step6_grouped.cuh"   // PvLayout

namespace lesson02::step8 {

constexpr int kThreads = 256;  // 8 warps, each of which copies and computes
constexpr int kWarps = kThreads / 32;
// Dynamic shared memory a CTA may use: under the 99 KiB opt-in limit of sm_86 / sm_89,
// with room for the static arrays.
constexpr int kSmemLimit = 96 * 1024;

// HEADS_PER_CTA: the heads of one CTA rounded up to whole mma columns (8, 16 or 32).
template <int HEAD_SIZE, int HEADS_PER_CTA>
struct MmaLayout {
    static constexpr int kTile = 8192 / HEAD_SIZE;          // tokens per staged tile: 16 KiB of K or V
    static constexpr int kRow = tile_row_elems(HEAD_SIZE);  // D + 8 elements: rows padded by 16 bytes
    static constexpr int kNTiles = HEADS_PER_CTA / 8;       // 8-head column blocks
    static constexpr int kKSteps = kTile / 16;              // 16-token steps of a tile
    static constexpr int kQkItems = kKSteps * kNTiles;      // 16-token x 8-head logit blocks per tile
    static constexpr int kLogitStride = kTile + 8;  // p[h][t], p[h][t + 1] as one 8-byte read, no bank conflict
    // Dynamic shared memory, in bytes:
    //   tiles   [kStages][kTile][kRow] K or V elements (at the end: the token lanes' PV partials)
    //   q       [HEADS_PER_CTA][kRow] elements, unscaled (heads past the group are zero)
    //   logits  [HEADS_PER_CTA][kTile + 8] floats: a token tile's logits, then its p. One
    //           buffer: the next token tile writes its logits only after the barrier that
    //           starts its K tile, which every warp reaches after this tile's PV.
    static constexpr int kTileBytes = kTile * kRow * 2;
    static constexpr int kLogitFloats = HEADS_PER_CTA * kLogitStride;
    static constexpr int kFixedBytes = HEADS_PER_CTA * kRow * 2 + kLogitFloats * 4;
    // As many ring slots as fit under kSmemLimit, at most 4 (three tiles in flight while
    // one is read).
    static constexpr int kStages = (kSmemLimit - kFixedBytes) / kTileBytes < 4 ? (kSmemLimit - kFixedBytes) / kTileBytes : 4;
    static constexpr int kSmemBytes = kStages * kTileBytes + kFixedBytes;
    static_assert(HEAD_SIZE == 64 || HEAD_SIZE == 128 || HEAD_SIZE == 256, "head sizes 64, 128 and 256");
    static_assert(HEADS_PER_CTA == 8 || HEADS_PER_CTA == 16 || HEADS_PER_CTA == 32, "heads are padded to 8, 16 or 32");
    static_assert(kTile % 32 == 0, "a tile starts on a page boundary for every page size (8, 16, 32)");
    static_assert(HEADS_PER_CTA >= kWarps, "chunk_softmax gives each head one whole warp");
    static_assert(kStages >= 3, "the ring needs at least three slots");
    static_assert(kSmemBytes <= kSmemLimit, "the ring must fit every sm_80+ GPU");
    static_assert(PvLayout<HEAD_SIZE, HEADS_PER_CTA>::kTokenLanes * HEADS_PER_CTA * HEAD_SIZE * 4 <= kStages * kTileBytes,
                  "the token lanes' partials reuse the ring");
};

// The copies of K/V tiles into the ring with cp.async, by every thread of the CTA. Thread
// `tid` always copies the same 16-byte piece of rows row0, row0 + kRowsPerPass, ... of a
// tile, so a copy costs one multiply-add on top of the cp.async. The page ids of a token
// tile are read from the block table when the previous token tile's V is issued (a
// dependent global load right before a copy would hold it up), and serve both its K and
// its V tile.
template <class scalar_t, int HEAD_SIZE>
struct TileCopier {
    static constexpr int kPieces = HEAD_SIZE / 8;            // 16-byte pieces of a row
    static constexpr int kRowsPerPass = kThreads / kPieces;  // rows one pass of the CTA copies
    static constexpr int kTile = MmaLayout<HEAD_SIZE, 8>::kTile;
    static constexpr int kRowsPerThread = kTile / kRowsPerPass;  // 4: a tile is 1024 pieces
    static constexpr int kRow = tile_row_elems(HEAD_SIZE);
    static_assert(kThreads % kPieces == 0 && kTile % kRowsPerPass == 0, "every row of a tile has one copier per piece");

    const scalar_t* k_cache;   // [num_blocks, Hkv, block_size, D]
    const scalar_t* v_cache;
    const int* seq_pages;      // this sequence's block-table row
    int block_stride;          // elements between blocks: Hkv * block_size * D (a few million at most)
    int src_offset[kRowsPerThread];  // where row k of any tile sits in its block, plus kv_head and piece
    int row0, smem_offset;     // first row; its piece's place in a staged tile
    int block_shift, ctx;
    int block_ids[kRowsPerThread];  // physical blocks of this thread's rows of the next token tile (-1 past the end)

    __device__ TileCopier(int tid, const scalar_t* k, const scalar_t* v, const int* pages, int Hkv, int kv_head,
                          int block_size, int context)
        : k_cache(k), v_cache(v), seq_pages(pages) {
        const int piece = tid % kPieces;
        row0 = tid / kPieces;
        smem_offset = row0 * kRow + piece * 8;
        block_shift = __ffs(block_size) - 1;  // block sizes are powers of two, and divide kTile
        block_stride = Hkv * block_size * HEAD_SIZE;
#pragma unroll
        for (int k = 0; k < kRowsPerThread; ++k)  // tile starts are multiples of the block size
            src_offset[k] = (kv_head * block_size + ((row0 + k * kRowsPerPass) & (block_size - 1))) * HEAD_SIZE + piece * 8;
        ctx = context;
        load_block_ids(0);
    }

    __device__ __forceinline__ void load_block_ids(int token_tile) {
#pragma unroll
        for (int k = 0; k < kRowsPerThread; ++k) {
            const int t = token_tile * kTile + row0 + k * kRowsPerPass;
            block_ids[k] = t < ctx ? __ldg(seq_pages + (t >> block_shift)) : -1;
        }
    }

    // Stream tile s (even: K of token tile s / 2, odd: its V) into buf = its ring slot
    // [kTile][kRow], and commit it as one cp.async group. Rows past the sequence's end are
    // zeroed (this step never reads them; the mma of steps 8 and 9 multiplies whole 16-row
    // blocks, and a stale NaN times p = 0 would still be NaN). Tiles must be issued in order.
    __device__ __forceinline__ void issue(scalar_t* buf, int s) {
        const scalar_t* cache = s % 2 == 0 ? k_cache : v_cache;
        buf += smem_offset;
#pragma unroll
        for (int k = 0; k < kRowsPerThread; ++k) {
            scalar_t* dst = buf + k * kRowsPerPass * kRow;
            if (block_ids[k] >= 0)  // cache[block, kv_head, t % block_size, piece * 8 .. + 8]
                pa::cp_async16(dst, cache + static_cast<long long>(block_ids[k]) * block_stride + src_offset[k]);
            else
                *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        }
        pa::cp_async_commit();
        if (s % 2 == 1) load_block_ids(s / 2 + 1);
    }
};


template <class scalar_t, int HEAD_SIZE, int HEADS_PER_CTA>
__global__ void __launch_bounds__(kThreads, 2)
grouped_mma_qk_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                          const scalar_t* __restrict__ q,         // [B, H, D]
                          const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                          const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                          const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                          const int* __restrict__ context_lens,   // [B]
                          int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
    using L = MmaLayout<HEAD_SIZE, HEADS_PER_CTA>;
    using Pv = PvLayout<HEAD_SIZE, HEADS_PER_CTA>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kStages;
    constexpr int stride = L::kLogitStride;

    const int seq = blockIdx.y;
    const int kv_head = blockIdx.x;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int num_stream_tiles = 2 * ((ctx + kTile - 1) / kTile);  // K0 V0 K1 V1 ...

    extern __shared__ __align__(16) float smem[];
    scalar_t* tiles = reinterpret_cast<scalar_t*>(smem);                        // [kStages][kTile][kRow]
    scalar_t* q_tile = tiles + kStages * kTile * kRow;                          // [HEADS_PER_CTA][kRow]
    float* logits = reinterpret_cast<float*>(q_tile + HEADS_PER_CTA * kRow);    // [HEADS_PER_CTA][kTile + 8]
    __shared__ float m_run[HEADS_PER_CTA], l_run[HEADS_PER_CTA], alpha[HEADS_PER_CTA];
    __shared__ float red_max[kWarps], red_sum[kWarps];

    // The first kStages - 1 tiles start on their way before anything else. Past the last
    // tile a thread commits an empty group, so that wait<kStages - 2> at tile s always
    // means "this thread's copies of tile s have landed".
    TileCopier<scalar_t, HEAD_SIZE> copier(threadIdx.x, k_cache, v_cache, seq_pages, Hkv, kv_head, block_size, ctx);
    auto issue = [&](int s) {
        if (s < num_stream_tiles) copier.issue(tiles + s % kStages * kTile * kRow, s);
        else pa::cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);

    // q rows of the group, 16 bytes at a time: q_tile[h][d] = q[seq, first_head + h, d]
    // (published, with m_run and l_run, by the first barrier of the tile loop)
    constexpr int kPiecesPerRow = HEAD_SIZE / 8;
    for (int i = threadIdx.x; i < HEADS_PER_CTA * kPiecesPerRow; i += kThreads) {
        const int h = i / kPiecesPerRow, piece = i % kPiecesPerRow;
        uint4 w = make_uint4(0, 0, 0, 0);
        if (h < num_heads)
            w = *reinterpret_cast<const uint4*>(q + (static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + piece * 8);
        *reinterpret_cast<uint4*>(q_tile + h * kRow + piece * 8) = w;
    }
    if (threadIdx.x < HEADS_PER_CTA) {
        m_run[threadIdx.x] = -INFINITY;
        l_run[threadIdx.x] = 0.f;
    }

    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int g = lane / 4, c = lane % 4;  // fragment row and column pair (see mma.cuh)

    // PV ownership: 8 dims (one 16-byte vector) of heads_per_thread heads, tokens split by lane.
    const int pv_vec = threadIdx.x % Pv::kVecsPerRow;
    const int pv_head_group = threadIdx.x / Pv::kVecsPerRow % Pv::kHeadGroups;
    const int pv_token_lane = threadIdx.x / (Pv::kVecsPerRow * Pv::kHeadGroups);
    float acc[Pv::kHeadsPerThread][8];
#pragma unroll
    for (int j = 0; j < Pv::kHeadsPerThread; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j][e] = 0.f;

    for (int s = 0; s < num_stream_tiles; ++s) {
        pa::cp_async_wait<kStages - 2>();  // this thread's copies of tile s have landed
        __syncthreads();  // everyone's have, and no warp reads tile s - 1 (its slot) any more
        issue(s + kStages - 1);  // into the slot of tile s - 1
        const scalar_t* buf = tiles + s % kStages * kTile * kRow;  // [kTile][kRow], rows >= n are zero
        const int n = min(kTile, ctx - s / 2 * kTile);             // tokens of this token tile

        if (s % 2 == 0) {
            // 1. logits[h][t] = scale * (K_tile[t] . q[h]), one 16-token x 8-head block per warp and step.
            for (int item = warp; item < L::kQkItems; item += kWarps) {
                const int mt = item % L::kKSteps, nt = item / L::kKSteps;
                if (mt * 16 >= n) continue;  // the whole block is past the sequence's end
                float cf[2][4] = {};         // two partial sums: the mma chain is half as long
#pragma unroll
                for (int ks = 0; ks < HEAD_SIZE / 16; ++ks) {
                    uint32_t a[4], b[2];
                    // A: tokens mt*16 + (lane % 16), dims ks*16 + (lane / 16) * 8 .. + 8
                    pa::ldmatrix_x4(a, buf + (mt * 16 + lane % 16) * kRow + ks * 16 + lane / 16 * 8);
                    // B: heads nt*8 + (lane % 8), dims ks*16 + (lane / 8 % 2) * 8 .. + 8
                    pa::ldmatrix_x2(b, q_tile + (nt * 8 + lane % 8) * kRow + ks * 16 + lane / 8 % 2 * 8);
                    pa::mma_16816<scalar_t>(cf[ks % 2], a, b);
                }
                const int t = mt * 16 + g, h = nt * 8 + 2 * c;
                float* row0 = logits + h * L::kLogitStride;  // logits[h][.], then logits[h + 1][.]
                if (t < n) {
                    row0[t] = (cf[0][0] + cf[1][0]) * scale;
                    row0[L::kLogitStride + t] = (cf[0][1] + cf[1][1]) * scale;
                }
                if (t + 8 < n) {
                    row0[t + 8] = (cf[0][2] + cf[1][2]) * scale;
                    row0[L::kLogitStride + t + 8] = (cf[0][3] + cf[1][3]) * scale;
                }
            }
            continue;
        }

        // 2. Every warp has written its logits (the barrier at the top): the softmax step
        //    with the tile as the chunk, then every accumulator is rescaled by its head's alpha.
        chunk_softmax<HEADS_PER_CTA, kWarps>(logits, stride, n, num_heads, m_run, l_run, alpha, red_max, red_sum);
        __syncthreads();  // p and alpha are written
#pragma unroll
        for (int j = 0; j < Pv::kHeadsPerThread; ++j) {
            const int h = pv_head_group * Pv::kHeadsPerThread + j;
            const float a = h < num_heads ? alpha[h] : 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[j][e] *= a;
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
                const float p = logits[h * stride + tt];
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[j][e] += p * v[e];
            }
        }
    }

    // 4. Token lanes add up (through the ring), divide by the running sum, store 16 bytes.
    pa::cp_async_wait<0>();  // only empty groups are left, but leave none behind
    __syncthreads();         // every warp is done with the ring, and l_run is final
    if constexpr (Pv::kTokenLanes > 1) {
        float* partials = smem;  // [token_lanes][HEADS_PER_CTA][HEAD_SIZE]
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
                // registers and spilled (step 6); this runs once per CTA.
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

}  // namespace lesson02::step8
