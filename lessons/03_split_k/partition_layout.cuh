// Lesson 03: the layout and the cp.async producers of the tensor-core partition kernels (steps 3
// to 6), so that each step file shows only its kernel: the CTA's roles (8 consumer warps for the
// math, 4 producer warps for the copies) and MmaLayout (tiles, ring depth, how the mma work
// spreads over the consumer warps) are lesson 02's step 10 layout, used as they are; TileProducer
// (a producer thread's share of a K or V tile, the page ids read a tile ahead) is step 10's with
// the partition's first and last token in place of the context.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "grouped_common.cuh"  // lesson 02: chunk_softmax, tile_tokens, tile_row_elems
#include "ws_layout.cuh"       // lesson 02: MmaLayout, the thread counts, the shared-memory limits

namespace lesson03 {

using lesson02::chunk_softmax;
using lesson02::tile_row_elems;
using lesson02::tile_tokens;

// The CTA's roles, the shared-memory limits and MmaLayout are lesson 02's step 10 layout
// (ws_layout.cuh), used as they are.
using lesson02::kConsumerBarrier;
using lesson02::kConsumerThreads;
using lesson02::kConsumerWarps;
using lesson02::kMmaSmemLimit;
using lesson02::kMmaThreads;
using lesson02::kProducerThreads;
using lesson02::MmaLayout;

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
