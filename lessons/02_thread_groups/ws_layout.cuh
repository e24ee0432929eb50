// Lesson 02: the layout of the warp-specialised grouped CTA, which step 10 introduces and steps 11
// and 10 keep: the thread counts of the two roles, the shared-memory limits of one and two CTAs
// per SM, and MmaLayout (tiles, ring depth, how the mma work spreads over the consumer warps).
// Only the producers change from step 10 to steps 11 and 12, so the layout lives here, once.
#pragma once

#include "grouped_common.cuh"  // tile_tokens, tile_row_elems

namespace lesson02 {

// What one CTA may ask for on sm_90 (227 KiB opt-in) less 1 KiB for the static arrays. Two
// CTAs share an SM's 228 KiB, less 1 KiB the system keeps per CTA and room for the static
// arrays; that layout also fits an A100 (163 KiB a CTA). GPUs with 99 KiB a CTA (sm_86,
// sm_89) fit neither: the variant says so, and step 9 runs there.
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

}  // namespace lesson02
