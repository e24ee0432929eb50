// Lesson 03: the layout and the cp.async producers of the tensor-core partition kernels (steps 3
// to 6), moved here unchanged from lesson 02's step 10 so that each step file shows only its
// kernel: the CTA's roles (8 consumer warps for the math, 4 producer warps for the copies),
// MmaLayout (tiles, ring depth, how the mma work spreads over the consumer warps) and
// TileProducer (a producer thread's share of a K or V tile, the page ids read a tile ahead).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "grouped_common.cuh"  // lesson 02: chunk_softmax, tile_tokens, tile_row_elems

namespace lesson03 {

using lesson02::chunk_softmax;
using lesson02::tile_row_elems;
using lesson02::tile_tokens;

// What one CTA may ask for on sm_90 (227 KiB opt-in) less 1 KiB for the static arrays. Two
// CTAs share an SM's 228 KiB, less 1 KiB the system keeps per CTA and room for the static
// arrays; that layout also fits an A100 (163 KiB a CTA). GPUs with 99 KiB a CTA (sm_86,
// sm_89) fit neither: the step says so, and steps 1 and 2 run there.
constexpr int kMmaSmemLimit = 226 * 1024;
constexpr int kMmaSmemLimitTwoPerSm = 228 * 1024 / 2 - 1024 - 256;
constexpr int kConsumerThreads = 256;  // warps 0..7: the math
constexpr int kProducerThreads = 128;  // warps 8..11: the copies
constexpr int kMmaThreads = kConsumerThreads + kProducerThreads;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kConsumerBarrier = 1;  // named barrier id of the consumer warps

// HEADS_PER_CTA: the heads of one CTA rounded up to whole mma columns (8, 16 or 32).
// CTAS_PER_SM: 1, or 2 (a shallower ring, so that two CTAs fit on an SM).
template <int HEAD_SIZE, int HEADS_PER_CTA, int CTAS_PER_SM>
struct MmaLayout {
    static constexpr int kTile = tile_tokens(HEAD_SIZE);    // tokens per staged tile: 128 (64 at D 256)
    static constexpr int kRow = tile_row_elems(HEAD_SIZE);  // D + 8 elements: rows padded by 16 bytes
    static constexpr int kNTiles = HEADS_PER_CTA / 8;             // 8-head column blocks
    static constexpr int kKSteps = kTile / 16;              // 16-token steps of a tile
    static constexpr int kQkItems = kKSteps * kNTiles;      // 16-token x 8-head logit blocks per tile
    // Output blocks (16 dims x 8 heads) live in registers for the whole kernel. With fewer
    // blocks than consumer warps, kPvSplit warps share a block, each taking some of the
    // tile's 16-token steps; their partial sums are added once, at the end.
    static constexpr int kPvItems = HEAD_SIZE / 16 * kNTiles;
    static constexpr int kPvSplit = kPvItems >= kConsumerWarps ? 1 : kConsumerWarps / kPvItems;
    static constexpr int kWarpsPerSplit = kConsumerWarps / kPvSplit;
    static constexpr int kPvItemsPerWarp = kPvItems / kWarpsPerSplit;
    static constexpr int kKStepsPerSplit = kKSteps / kPvSplit;
    static constexpr int kLogitStride = kTile + 8;  // p[h][t], p[h][t + 1] as one 8-byte read, no bank conflict
    // Dynamic shared memory, in bytes:
    //   tiles   [stages][kTile][kRow] K or V elements (at the end: the split partial sums)
    //   q       [HEADS_PER_CTA][kRow] elements, unscaled (heads past the group are zero)
    //   logits  [2][HEADS_PER_CTA][kTile + 8] floats: a token tile's logits, then its p; two
    //           buffers, used by even and odd token tiles
    static constexpr int kTileBytes = kTile * kRow * 2;
    static constexpr int kLogitFloats = HEADS_PER_CTA * kLogitStride;
    static constexpr int kFixedBytes = HEADS_PER_CTA * kRow * 2 + 2 * kLogitFloats * 4;
    // As many ring slots as fit, at most 6 (204 KiB at D 128).
    static constexpr int kSmemLimit = CTAS_PER_SM == 1 ? kMmaSmemLimit : kMmaSmemLimitTwoPerSm;
    static constexpr int kStages = (kSmemLimit - kFixedBytes) / kTileBytes < 6 ? (kSmemLimit - kFixedBytes) / kTileBytes : 6;
    static constexpr int kSmemBytes = kStages * kTileBytes + kFixedBytes;
    static_assert(HEADS_PER_CTA == 8 || HEADS_PER_CTA == 16 || HEADS_PER_CTA == 32, "heads are padded to 8, 16 or 32");
    static_assert(CTAS_PER_SM == 1 || CTAS_PER_SM == 2, "one or two CTAs per SM");
    static_assert(HEADS_PER_CTA >= kConsumerWarps, "chunk_softmax gives each head one whole warp");
    static_assert(kPvItemsPerWarp * kWarpsPerSplit == kPvItems && kKStepsPerSplit * kPvSplit == kKSteps,
                  "output blocks and token steps must spread evenly over the warps");
    static_assert(kStages >= 3, "the ring needs at least three slots");
    static_assert((kPvSplit - 1) * HEADS_PER_CTA * HEAD_SIZE * 4 <= kStages * kTileBytes, "split partials reuse the ring");
};

// The producer side: copies of K/V tiles into the ring with cp.async. Producer thread `tid`
// always copies the same 16-byte piece of rows row0, row0 + kRowsPerPass, ... of a tile, so
// a copy costs one multiply-add on top of the cp.async. The page ids of a token tile are
// read from the block table while the previous token tile's V is copied (a dependent
// global load right before a copy would hold it up), and serve both its K and its V tile.
template <class scalar_t, int HEAD_SIZE>
struct TileProducer {
    static constexpr int kPieces = HEAD_SIZE / 8;                    // 16-byte pieces of a row
    static constexpr int kRowsPerPass = kProducerThreads / kPieces;  // rows one pass of the producers copies
    static constexpr int kTile = tile_tokens(HEAD_SIZE);
    static constexpr int kRowsPerThread = kTile / kRowsPerPass;
    static constexpr int kRow = tile_row_elems(HEAD_SIZE);
    static_assert(kProducerThreads % kPieces == 0 && kTile % kRowsPerPass == 0, "every row of a tile has one copier per piece");

    const scalar_t* k_cache;   // [num_blocks, Hkv, block_size, D]
    const scalar_t* v_cache;
    const int* seq_pages;      // this sequence's block-table row
    int block_stride;          // elements between blocks: Hkv * block_size * D (a few million at most)
    int src_offset[kRowsPerThread];  // where row k of any tile sits in its block, plus kv_head and piece
    int row0, smem_offset;     // first row; its piece's place in a staged tile
    int block_shift, t_begin, t_end;  // the partition: tokens [t_begin, t_end)
    int block_ids[kRowsPerThread];  // physical blocks of this thread's rows of the next token tile (-1 past the end)

    __device__ TileProducer(int tid, const scalar_t* k, const scalar_t* v, const int* pages, int Hkv, int kv_head,
                            int block_size, int first_token, int end_token)
        : k_cache(k), v_cache(v), seq_pages(pages) {
        const int piece = tid % kPieces;
        row0 = tid / kPieces;
        smem_offset = row0 * kRow + piece * 8;
        block_shift = __ffs(block_size) - 1;  // block sizes are powers of two, and divide kTile
        block_stride = Hkv * block_size * HEAD_SIZE;
#pragma unroll
        for (int k = 0; k < kRowsPerThread; ++k)  // tile starts are multiples of the block size (t_begin is too)
            src_offset[k] = (kv_head * block_size + ((row0 + k * kRowsPerPass) & (block_size - 1))) * HEAD_SIZE + piece * 8;
        t_begin = first_token;
        t_end = end_token;
        load_block_ids(0);
    }

    __device__ __forceinline__ void load_block_ids(int token_tile) {
#pragma unroll
        for (int k = 0; k < kRowsPerThread; ++k) {
            const int t = t_begin + token_tile * kTile + row0 + k * kRowsPerPass;
            block_ids[k] = t < t_end ? __ldg(seq_pages + (t >> block_shift)) : -1;
        }
    }

    // Stream tile s (even: K of token tile s / 2, odd: its V) into buf = its ring slot
    // [kTile][kRow], and commit it as one cp.async group. Rows past the partition's end are
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

}  // namespace lesson03
