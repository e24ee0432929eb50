// Lesson 05's CTA, as both of its roles see it: its sizes, the layouts of its shared memory
// (the ring and the per-tile buffers), the order in which a CTA's tiles go through the
// ring, and the sequences a CTA serves. The producers (gated_copies.cuh) and the consumers
// (gated_tile.cuh) agree on nothing else.
//
// The CTA is lesson 02's grouped one: one CTA per (sequence, KV head) serves the `group`
// query heads that share it, so each K/V element is read once: 4 producer warps copy K and
// V tiles of 128 tokens into a ring, 8 consumer warps compute. Three layouts: one CTA per SM
// with a 6-slot ring (sm_90, when the grid fits the GPU), two per SM with a 3-slot ring (a
// grid larger than the GPU; an A100's 163 KiB), and one per SM with a 2-slot ring (GPUs with
// 99 KiB a CTA: sm_86, sm_89). The stream runs kAhead K tiles ahead of the V tiles
// (stream_item; gated_tile.cuh says why).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lesson05 {

constexpr int kHeadSize = 128;              // D
constexpr int kHeads = 8;                   // query heads per CTA: one mma column block
constexpr int kTile = 128;                  // tokens per staged K or V tile
constexpr int kRow = kHeadSize + 8;         // a staged row, padded by 16 bytes: ldmatrix rows on distinct banks
constexpr int kTileElems = kTile * kRow;    // a staged tile: [kTile][kRow]
constexpr int kConsumerThreads = 256;       // warps 0..7: the math
constexpr int kProducerThreads = 128;       // warps 8..11: the copies
constexpr int kThreads = kConsumerThreads + kProducerThreads;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kConsumerBarrier = 1;         // named barrier id of the consumer warps
constexpr int kProducerBarrier = 2;         // named barrier id of the producer warps
constexpr int kGateThreads = kTile;         // consumer threads 0..127: one token of a tile each
constexpr int kScoreStride = kTile + 4;     // a scores buffer, scores[h][t]: heads 2c and 2c + 1 of one mma land on distinct banks
constexpr int kSlotScoreRegion = 16 * kRow * 2 / 4;  // scores in the K slot: floats in the 16 rows of K one consumer warp reads
constexpr int kScoreHeadStride = 20;        // ... where one head takes 20: the 8 x 4 lanes of a QK store hit distinct banks
constexpr int kPStride = kTile + 8;         // p16[h][j], 16-bit: the PV step's B loads are conflict-free
constexpr int kFirK = 3;                    // taps of the gate's moving average (reference FIR_K)
static_assert(kTile / 16 == kConsumerWarps, "QK: one 16-token block per consumer warp");
static_assert(kHeadSize / 16 == kConsumerWarps, "PV: one 16-dim block per consumer warp");
static_assert(kGateThreads % 32 == 0 && kGateThreads <= kConsumerThreads, "gate threads are whole consumer warps");

// What one CTA may ask for on sm_90 (227 KiB opt-in) less 1 KiB for the static arrays; two
// CTAs share an SM's 228 KiB less 1 KiB the system keeps per CTA and 256 bytes of static
// arrays. The two-per-SM layout also fits an A100 (163 KiB a CTA), one CTA per SM there.
// GPUs with 99 KiB a CTA (sm_86, sm_89) fit neither: they get the third layout, a 2-slot
// ring within 99 KiB less 1 KiB for the static arrays.
constexpr int kSmemLimitOnePerSm = 226 * 1024;
constexpr int kSmemLimitTwoPerSm = 228 * 1024 / 2 - 1024 - 256;
constexpr int kSmemLimitSmall = 99 * 1024 - 1024;

// Dynamic shared memory, in bytes:
//   tiles   [kStages][kTile][kRow]       K or V elements (at two CTAs per SM, a K tile's scores too)
//   scores  [kHeads][kScoreStride]       float: one token tile's scaled scores (one CTA per SM only)
//   p16     [kBufs][kHeads][kPStride]    the weights in the storage type (the mma's B operand):
//                                        a tile's gate runs kAhead tiles before its PV, so
//                                        kAhead + 1 tiles' weights are alive at once
//   rows    [kBufs][kTile]               uint8: which rows to copy (step 8) or the list (steps 9-11)
//   carry   [3][kHeads][2]               float: r_{T-2}, r_{T-1} of the tile before (two buffers),
//                                        and zeros (what a sequence's first tile reads)
//   pages   [kPageSlots]                 int: the CTA's page ids, from its first page on, when they fit
// CTAS_PER_SM 1: a 6-slot ring, K tiles 3 ahead; 2: a 3-slot ring, K tiles 2 ahead. The
// third layout, for GPUs with 99 KiB a CTA, is one CTA per SM with a 2-slot ring (STAGES 2,
// kSmallStages), K tiles 1 ahead, and otherwise what one CTA per SM does (a scores buffer,
// cp.async): three slots of 34 KiB do not fit beside the per-tile buffers, so its ring holds
// the tile being computed and one tile in flight. The page array takes what the layout's
// shared memory has left: 976 ids at two CTAs per SM (15616 tokens in pages of 16), 2048 in
// the two others.
// K tiles ahead at two CTAs per SM (-DLESSON05_TWO_PER_SM_AHEAD=1 or 3 to compare; the
// README's "How far K runs ahead").
#ifndef LESSON05_TWO_PER_SM_AHEAD
#define LESSON05_TWO_PER_SM_AHEAD 2
#endif
static_assert(LESSON05_TWO_PER_SM_AHEAD >= 1 && LESSON05_TWO_PER_SM_AHEAD <= 3,
              "1 to 3 K tiles ahead: with more, the weights of kAhead + 1 tiles no longer fit the two-per-SM layout");

constexpr int kSmallStages = 2;  // the ring of the layout for 99 KiB a CTA
constexpr int default_stages(int ctas_per_sm) { return ctas_per_sm == 1 ? 6 : 3; }

template <int CTAS_PER_SM, int STAGES = default_stages(CTAS_PER_SM)>
struct Layout {
    static constexpr bool kSmall = STAGES == kSmallStages;  // the third layout (99 KiB a CTA)
    static constexpr int kStages = STAGES;
    static constexpr int kAhead = kSmall ? 1 : CTAS_PER_SM == 1 ? 3 : LESSON05_TWO_PER_SM_AHEAD;  // K tiles issued before the V tile of the oldest gated tile
    static constexpr int kBufs = kAhead + 1;    // tiles whose weights are alive at once
    static constexpr bool kBulkCopies = CTAS_PER_SM == 2;  // bulk rows where the GPU has them (sm_90), else cp.async
    static constexpr bool kScoresInSlot = CTAS_PER_SM == 2;  // a K tile's scores over the tile, else in `scores`
    static constexpr int kScoreRegion = kScoresInSlot ? kSlotScoreRegion : 0;  // score_index: 0 for the buffer
    static constexpr int kTileBytes = kTileElems * 2;
    static constexpr int kScoreBytes = kScoresInSlot ? 0 : kHeads * kScoreStride * 4;
    static constexpr int kPBytes = kBufs * kHeads * kPStride * 2;
    static constexpr int kRowsBytes = kBufs * kTile;
    static constexpr int kCarryBytes = 3 * kHeads * 2 * 4;
    static constexpr int kSmemLimit = kSmall ? kSmemLimitSmall : CTAS_PER_SM == 1 ? kSmemLimitOnePerSm : kSmemLimitTwoPerSm;
    static constexpr int kBaseBytes = kStages * kTileBytes + kScoreBytes + kPBytes + kRowsBytes + kCarryBytes;
    static constexpr int kPageSlotsLeft = (kSmemLimit - kBaseBytes) / 4 / 16 * 16;  // whole 64-byte lines of ids
    static constexpr int kPageSlots = kPageSlotsLeft < 2048 ? kPageSlotsLeft : 2048;
    static constexpr int kSmemBytes = kBaseBytes + kPageSlots * 4;
    static_assert(CTAS_PER_SM == 1 || CTAS_PER_SM == 2, "one or two CTAs per SM");
    static_assert(STAGES == default_stages(CTAS_PER_SM) || (CTAS_PER_SM == 1 && kSmall),
                  "the three layouts: 6 slots at one CTA per SM, 3 at two, or the 2-slot ring at one");
    static_assert(kSmemBytes <= kSmemLimit, "the ring and the per-tile buffers must fit the layout's shared memory");
    static_assert(kPageSlots >= 256, "the page array holds at least 2048 tokens' pages of 8");
    static_assert(kPBytes % 16 == 0 && kScoreBytes % 16 == 0, "every array starts on 16 bytes");
};

template <class scalar_t>
struct Smem {
    scalar_t* tiles;
    float* scores;  // nullptr where the scores are in the K slot
    scalar_t* p16;
    uint8_t* rows;
    float* carry;
    int* pages;
};

template <class scalar_t, int CTAS_PER_SM, int STAGES = default_stages(CTAS_PER_SM)>
__device__ __forceinline__ Smem<scalar_t> carve_smem(unsigned char* base) {
    using L = Layout<CTAS_PER_SM, STAGES>;
    Smem<scalar_t> s;
    s.tiles = reinterpret_cast<scalar_t*>(base);
    s.scores = L::kScoresInSlot ? nullptr : reinterpret_cast<float*>(base + L::kStages * L::kTileBytes);
    s.p16 = reinterpret_cast<scalar_t*>(base + L::kStages * L::kTileBytes + L::kScoreBytes);
    s.rows = base + L::kStages * L::kTileBytes + L::kScoreBytes + L::kPBytes;
    s.carry = reinterpret_cast<float*>(s.rows + L::kRowsBytes);
    s.pages = reinterpret_cast<int*>(s.rows + L::kRowsBytes + L::kCarryBytes);
    return s;
}

// ---------------------------------------------------------------------------------------
// The stream of one CTA with n token tiles, in issue order (A = AHEAD):
//   K0, K1, ..., K_A,   V0, K_{A+1},   V1, K_{A+2},   ...,   V_{n-A-2}, K_{n-1},   V_{n-A-1}, ..., V_{n-1}
// Producers issue it in this order and consumers consume it in this order, one ring slot per
// item: stream position s uses slot s % kStages.
struct StreamItem {
    bool is_v;
    int tile;
};

template <int AHEAD>
__device__ __forceinline__ StreamItem stream_item(int s, int n) {
    const int m = min(n, AHEAD + 1);  // K tiles before the first V tile
    if (s < m) return {false, s};
    const int u = s - m, pairs = n - m;  // then (V_i, K_{i+A+1}) pairs, then the last V tiles
    if (u < 2 * pairs) return (u & 1) ? StreamItem{false, u / 2 + AHEAD + 1} : StreamItem{true, u / 2};
    return {true, pairs + (u - 2 * pairs)};
}

// ---------------------------------------------------------------------------------------
// The sequences of one CTA. A CTA serves one KV head of SEQS consecutive
// sequences (1 or 2; grid.y = ceil(B / SEQS)) and streams their tiles as one run:
// tile g of the run is tile g - first_tile(k) of its k-th sequence, k = which(g). With two,
// the producers issue the second sequence's first K tiles while the consumers finish the
// first one's V tiles, so the second sequence pays no start of its own (README: "Two
// sequences per CTA"). Plain fields, not arrays: a runtime index into an array would put
// it in local memory. SEQS is the most a kernel build streams: a SEQS = 1 build compiles to
// the one-sequence kernel it was before (no second producer, no test per tile).
template <int SEQS>
struct CtaSeqs {
    static_assert(SEQS == 1 || SEQS == 2, "one or two sequences per CTA");
    int count;             // sequences of this CTA: 1 or 2
    int seq0, seq1;        // their indices (seq1 = seq0 when count is 1)
    int ctx0, ctx1;        // their lengths
    int tiles0, total;     // tiles of the first; of both

    __device__ CtaSeqs(const int* context_lens, int B) {
        seq0 = blockIdx.y * SEQS;
        count = SEQS == 1 ? 1 : min(SEQS, B - seq0);
        seq1 = count > 1 ? seq0 + 1 : seq0;
        ctx0 = context_lens[seq0];
        ctx1 = context_lens[seq1];
        tiles0 = (ctx0 + kTile - 1) / kTile;
        total = count > 1 ? tiles0 + (ctx1 + kTile - 1) / kTile : tiles0;
    }
    __device__ __forceinline__ int which(int g) const { return SEQS > 1 && g >= tiles0 ? 1 : 0; }
    __device__ __forceinline__ int seq_of(int g) const { return which(g) ? seq1 : seq0; }
    __device__ __forceinline__ int local_tile(int g) const { return which(g) ? g - tiles0 : g; }
    __device__ __forceinline__ int tokens_in(int g) const { return min(kTile, (which(g) ? ctx1 : ctx0) - local_tile(g) * kTile); }
    __device__ __forceinline__ bool starts_sequence(int g) const { return g == 0 || (SEQS > 1 && g == tiles0); }
    __device__ __forceinline__ bool ends_sequence(int g) const { return g == total - 1 || (SEQS > 1 && g == tiles0 - 1); }
};

}  // namespace lesson05
