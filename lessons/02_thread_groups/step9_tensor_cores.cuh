// Lesson 02, step 9: the PV products on tensor cores too, so both GEMMs of the grouped CTA run on mma.sync.
//
// What changed since step 8 (step8_mma_qk.cuh), and why: the second GEMM of a token tile,
//   out^T[d][head] += V_tile^T[d][token] . P^T[token][head]   (D x tile) times (tile x heads)
// moves onto mma.sync.m16n8k16 as well: V rows are read transposed by ldmatrix (A), P is
// rounded to the storage type in registers (B), as FlashAttention does, and each output block
// (16 dims x 8 heads) stays in one warp's fp32 registers for the whole sequence (kPvSplit
// warps share a block when there are fewer blocks than warps, their partials added at the
// end). A grouped CTA does `group` times a per-head CTA's arithmetic on the same bytes; with
// both GEMMs on tensor cores that arithmetic costs next to nothing (README, step 9). The
// stream (K0 V0 K1 V1 ... through a ring of 16 KiB tiles, at most 94 KiB a CTA) is step 7's
// and the q.K mma step 8's; step 10 gives the copies warps of their own.
// Run: lesson02_thread_groups [--check | --bench] --variant grouped_mma
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "mma.cuh"
#include "grouped_common.cuh"  // chunk_softmax, tile_row_elems

namespace lesson02::step9 {

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
    // Output blocks (16 dims x 8 heads) live in registers for the whole kernel. With fewer
    // blocks than warps, kPvSplit warps share a block, each taking some of the tile's
    // 16-token steps; their partial sums are added once, at the end.
    static constexpr int kPvItems = HEAD_SIZE / 16 * kNTiles;
    static constexpr int kPvSplit = kPvItems >= kWarps ? 1 : kWarps / kPvItems;
    static constexpr int kWarpsPerSplit = kWarps / kPvSplit;
    static constexpr int kPvItemsPerWarp = kPvItems / kWarpsPerSplit;
    static constexpr int kKStepsPerSplit = kKSteps / kPvSplit;
    static constexpr int kLogitStride = kTile + 8;  // p[h][t], p[h][t + 1] as one 8-byte read, no bank conflict
    // Dynamic shared memory, in bytes:
    //   tiles   [kStages][kTile][kRow] K or V elements (at the end: the split partial sums)
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
    static_assert(kPvItemsPerWarp * kWarpsPerSplit == kPvItems && kKStepsPerSplit * kPvSplit == kKSteps,
                  "output blocks and token steps must spread evenly over the warps");
    static_assert(kStages >= 3, "the ring needs at least three slots");
    static_assert(kSmemBytes <= kSmemLimit, "the ring must fit every sm_80+ GPU");
    static_assert((kPvSplit - 1) * HEADS_PER_CTA * HEAD_SIZE * 4 <= kStages * kTileBytes, "split partials reuse the ring");
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
    // zeroed: an mma multiplies whole 16-row blocks, and a stale NaN times p = 0 would still
    // be NaN. Tiles must be issued in order.
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
grouped_mma_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                          const scalar_t* __restrict__ q,         // [B, H, D]
                          const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                          const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                          const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                          const int* __restrict__ context_lens,   // [B]
                          int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
    using L = MmaLayout<HEAD_SIZE, HEADS_PER_CTA>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kStages;

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

    // This warp's output blocks: item = warp % kWarpsPerSplit + j * kWarpsPerSplit covers dims
    // (item % (D/16)) * 16 .. + 16 and heads (item / (D/16)) * 8 .. + 8, over the 16-token steps
    // of split `pv_split`. acc[j] = {(d g, h 2c), (d g, h 2c+1), (d g+8, h 2c), (d g+8, h 2c+1)}.
    const int pv_split = warp / L::kWarpsPerSplit;
    const int pv_first_item = warp % L::kWarpsPerSplit;
    float acc[L::kPvItemsPerWarp][4];
#pragma unroll
    for (int j = 0; j < L::kPvItemsPerWarp; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;

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
        //    with the tile as the chunk (one warp per head), then every output block is
        //    rescaled by its heads' alpha.
        chunk_softmax<HEADS_PER_CTA, kWarps>(logits, L::kLogitStride, n, num_heads, m_run, l_run, alpha, red_max, red_sum);
        __syncthreads();  // p and alpha are written
        // 3. out^T[d][h] += V_tile^T[d][t] p[h][t], 16 tokens per mma. Tokens past the end and
        //    idle heads give p = 0 (their V rows are zero too).
#pragma unroll
        for (int j = 0; j < L::kPvItemsPerWarp; ++j) {
            const int item = pv_first_item + j * L::kWarpsPerSplit;
            const int mt = item % (HEAD_SIZE / 16), nt = item / (HEAD_SIZE / 16);
            const int h_acc = nt * 8 + 2 * c;  // heads of acc[j]: h_acc, h_acc + 1
            const float a0 = h_acc < num_heads ? alpha[h_acc] : 0.f;
            const float a1 = h_acc + 1 < num_heads ? alpha[h_acc + 1] : 0.f;
            acc[j][0] *= a0;
            acc[j][1] *= a1;
            acc[j][2] *= a0;
            acc[j][3] *= a1;
            const int h_p = nt * 8 + g;  // the head whose p this lane packs into B
            const float* prow = logits + h_p * L::kLogitStride;
            const bool head_on = h_p < num_heads;
            auto p_pair = [&](int t) {  // p[h_p][t], p[h_p][t + 1] (t even) as one operand register
                const float2 pp = *reinterpret_cast<const float2*>(prow + t);
                return pa::pack2(head_on && t < n ? pp.x : 0.f, head_on && t + 1 < n ? pp.y : 0.f, scalar_t{});
            };
#pragma unroll
            for (int kk = 0; kk < L::kKStepsPerSplit; ++kk) {  // steps past the end add zeros: no early exit
                const int ks = pv_split * L::kKStepsPerSplit + kk;
                uint32_t a[4], b[2];
                // A = V^T: tokens ks*16 + (lane % 8) + (lane / 16) * 8, dims mt*16 + (lane / 8 % 2) * 8 .. + 8
                pa::ldmatrix_x4_trans(a, buf + (ks * 16 + lane % 8 + lane / 16 * 8) * kRow + mt * 16 + lane / 8 % 2 * 8);
                const int t = ks * 16 + 2 * c;
                b[0] = p_pair(t);
                b[1] = p_pair(t + 8);
                pa::mma_16816<scalar_t>(acc[j], a, b);
            }
        }
    }

    // 4. Splits 1.. hand their partial sums to split 0 through the ring, which divides by the
    //    running sum and stores out[seq, first_head + h, d].
    float* partials = smem;  // [kPvSplit - 1][HEADS_PER_CTA][HEAD_SIZE]
    pa::cp_async_wait<0>();  // only empty groups are left, but leave none behind
    __syncthreads();         // every warp is done with the ring, and l_run is final
    if constexpr (L::kPvSplit > 1) {
        if (pv_split > 0) {
#pragma unroll
            for (int j = 0; j < L::kPvItemsPerWarp; ++j) {
                const int item = pv_first_item + j * L::kWarpsPerSplit;
                const int d = item % (HEAD_SIZE / 16) * 16 + g, h = item / (HEAD_SIZE / 16) * 8 + 2 * c;
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    partials[((pv_split - 1) * HEADS_PER_CTA + h + (e & 1)) * HEAD_SIZE + d + (e >> 1) * 8] = acc[j][e];
            }
        }
        __syncthreads();
    }
    if (pv_split == 0) {
#pragma unroll
        for (int j = 0; j < L::kPvItemsPerWarp; ++j) {
            const int item = pv_first_item + j * L::kWarpsPerSplit;
            const int d = item % (HEAD_SIZE / 16) * 16 + g, h = item / (HEAD_SIZE / 16) * 8 + 2 * c;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int he = h + (e & 1), de = d + (e >> 1) * 8;
                float o = acc[j][e];
                for (int sp = 1; sp < L::kPvSplit; ++sp) o += partials[((sp - 1) * HEADS_PER_CTA + he) * HEAD_SIZE + de];
                if (he < num_heads)
                    out[(static_cast<size_t>(seq) * H + first_head + he) * HEAD_SIZE + de] = pa::from_float<scalar_t>(o / l_run[he]);
            }
        }
    }
}

}  // namespace lesson02::step9
