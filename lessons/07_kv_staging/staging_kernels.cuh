// Lesson 07: the two copy kernels of a KV hand-off between servers of different TP.
//
// Lessons 01-06 read the paged KV cache; this one moves it. A prefill rank's request sits
// in its pools as pages scattered by the page table, and the decode rank that continues
// the request needs a different set of heads (TP 4 -> TP 2: two prefill ranks' heads
// side by side; TP 2 -> TP 4: half of one prefill rank's heads). Sent as it lies, that is
// one small copy per token per layer per K/V: O(tokens x layers) requests.
//
// Staging instead:
//   gather   one launch per prefill rank: every layer, K and V, of every chunk the rank
//            sends, from its paged pools into one contiguous staging buffer, already in
//            the order the decode rank wants;
//   transfer one bulk copy per (prefill rank, decode rank) pair;
//   scatter  one launch per decode rank: every writer's chunk, every layer, K and V,
//            from its staging bytes into the decode rank's pages.
//
// Both kernels are pure copies, so they should run at the speed of a device-to-device
// copy. What that takes:
//   - 16-byte vectors: a token's row of one head (D = 128 bf16 = 256 bytes) is 16 of
//     them, and 16 lanes move one row; two rows per warp are two full 128-byte lines on
//     each side.
//   - bytes in flight: each thread first issues kRowsPerThread independent loads (128
//     bytes), then the stores; the 3 or 4 CTAs of 256 threads an SM holds at these
//     kernels' register counts (64-80) keep about 100 KiB of loads outstanding per SM,
//     several times what DRAM latency x bandwidth asks of one SM. (Forcing 4 CTAs with
//     __launch_bounds__ makes ptxas spill.)
//   - no division per element: the page of each of a thread's tokens is looked up once
//     and reused for every head of the chunk.
//   - enough CTAs to fill the GPU: one per 128-token tile per layer per K/V per chunk,
//     thousands at the measured sizes.
// Run: lesson07_kv_staging [--check | --bench] [--shape T4096-L32-tp4to2]
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "staging_plan.h"

namespace lesson07 {

constexpr int kCopyThreads = 256;
constexpr int kVecBytes = 16;
constexpr int kVecsPerRow = kHeadDim * kElemBytes / kVecBytes;  // 16 vectors per token row of one head
constexpr int kRowsPerPass = kCopyThreads / kVecsPerRow;        // 16 token rows per pass of the CTA
constexpr int kRowsPerThread = 8;                               // vectors in flight per thread
constexpr int kTileTokens = kRowsPerPass * kRowsPerThread;      // 128 tokens per CTA
constexpr int kMaxChunks = 16;
static_assert(kHeadDim * kElemBytes % kVecBytes == 0, "a token row must be whole 16-byte vectors");
static_assert(kCopyThreads % kVecsPerRow == 0, "a CTA must hold whole rows");

// One chunk a launch moves: heads [pool_head_start, + num_heads) of the pool, to or from
// `staging_offset` (in 16-byte vectors), where it is laid out [layer_kv][token][head][D].
struct ChunkSlice {
    int pool_head_start;
    int num_heads;
    long long staging_offset;
};
struct ChunkList {
    ChunkSlice chunk[kMaxChunks];
    int count;
};

// The pool address of a thread's vector of token `pos`, head `head` of one layer:
// pool[block(pos), head, pos % kPageSize, vec] of [num_blocks, heads_per_rank, kPageSize, D].
__device__ __forceinline__ size_t pool_row(int block, int heads_per_rank, int head, int pos) {
    return ((static_cast<size_t>(block) * heads_per_rank + head) * kPageSize + pos % kPageSize) * kVecsPerRow;
}

// Grid: (ceil(num_tokens / kTileTokens), layers_kv, chunks), kCopyThreads threads.
// blockIdx.y picks the layer (K layers first, then V layers, as in `layers`).
__global__ void __launch_bounds__(kCopyThreads)
gather_to_staging_kernel(const uint4* const* __restrict__ layers,  // [layers_kv] -> [num_blocks, heads_per_rank, kPageSize, D]
                         const int* __restrict__ page_table,        // [pages]: logical page -> block of this rank's pool
                         int token_begin, int num_tokens, int heads_per_rank, ChunkList chunks,
                         uint4* __restrict__ staging) {             // each chunk: [layers_kv, num_tokens, num_heads, D]
    const int vec = threadIdx.x % kVecsPerRow;
    const int row = threadIdx.x / kVecsPerRow;
    const int layer_kv = blockIdx.y;
    const ChunkSlice c = chunks.chunk[blockIdx.z];
    const int tile = blockIdx.x * kTileTokens;
    const uint4* pool = layers[layer_kv];
    // staging[layer_kv][t][h][:] of this chunk
    uint4* out = staging + c.staging_offset + static_cast<size_t>(layer_kv) * num_tokens * c.num_heads * kVecsPerRow + vec;

    // Where this thread's tokens sit in the pool, at the chunk's first head. The page
    // lookup is done once here and reused for every head below.
    const uint4* src[kRowsPerThread];
    bool valid[kRowsPerThread];
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
        const int t = tile + row + j * kRowsPerPass;
        valid[j] = t < num_tokens;
        const int pos = token_begin + (valid[j] ? t : 0);
        src[j] = pool + pool_row(page_table[pos / kPageSize], heads_per_rank, c.pool_head_start, pos) + vec;
    }
    for (int h = 0; h < c.num_heads; ++h) {
        uint4 v[kRowsPerThread];
#pragma unroll
        for (int j = 0; j < kRowsPerThread; ++j)  // all loads first: kRowsPerThread in flight
            if (valid[j]) v[j] = src[j][static_cast<size_t>(h) * kPageSize * kVecsPerRow];
#pragma unroll
        for (int j = 0; j < kRowsPerThread; ++j)
            if (valid[j]) out[(static_cast<size_t>(tile + row + j * kRowsPerPass) * c.num_heads + h) * kVecsPerRow] = v[j];
    }
}

// The mirror image: grid (ceil(num_tokens / kTileTokens), layers_kv, writers). Chunk w is
// writer w's bytes of the decode rank's allocation; its heads land at pool_head_start.
__global__ void __launch_bounds__(kCopyThreads)
scatter_from_staging_kernel(uint4* const* __restrict__ layers,      // [layers_kv] -> [num_blocks, heads_per_rank, kPageSize, D]
                            const int* __restrict__ page_table,     // [pages]: logical page -> block of this rank's pool
                            int token_begin, int num_tokens, int heads_per_rank, ChunkList chunks,
                            const uint4* __restrict__ staging) {    // each chunk: [layers_kv, num_tokens, num_heads, D]
    const int vec = threadIdx.x % kVecsPerRow;
    const int row = threadIdx.x / kVecsPerRow;
    const int layer_kv = blockIdx.y;
    const ChunkSlice c = chunks.chunk[blockIdx.z];
    const int tile = blockIdx.x * kTileTokens;
    uint4* pool = layers[layer_kv];
    const uint4* in = staging + c.staging_offset + static_cast<size_t>(layer_kv) * num_tokens * c.num_heads * kVecsPerRow + vec;

    uint4* dst[kRowsPerThread];
    bool valid[kRowsPerThread];
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
        const int t = tile + row + j * kRowsPerPass;
        valid[j] = t < num_tokens;
        const int pos = token_begin + (valid[j] ? t : 0);
        dst[j] = pool + pool_row(page_table[pos / kPageSize], heads_per_rank, c.pool_head_start, pos) + vec;
    }
    for (int h = 0; h < c.num_heads; ++h) {
        uint4 v[kRowsPerThread];
#pragma unroll
        for (int j = 0; j < kRowsPerThread; ++j)
            if (valid[j]) v[j] = in[(static_cast<size_t>(tile + row + j * kRowsPerPass) * c.num_heads + h) * kVecsPerRow];
#pragma unroll
        for (int j = 0; j < kRowsPerThread; ++j)
            if (valid[j]) dst[j][static_cast<size_t>(h) * kPageSize * kVecsPerRow] = v[j];
    }
}

}  // namespace lesson07
