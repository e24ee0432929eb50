// Lesson 05's building blocks: what every step of its ladder does the same way. The steps
// (step1_dense.cuh .. step5_split_k_compact.cuh) differ only in which V rows are copied and
// how the PV step finds them; everything here is lesson 02's step 5, reworked for the gate.
//
// The CTA is lesson 02's grouped one: one CTA per (sequence, KV head) serves the `group`
// query heads that share it, so each K/V element is read once. 4 producer warps copy K and
// V tiles of 128 tokens into a ring with cp.async; 8 consumer warps compute
//   scores[h][t] = scale * K_tile[t] . q[h]       mma.sync.m16n8k16, one 16-token block per warp
//                                                 (at two CTAs per SM written over the K tile's rows)
//   p[h][t]      = the gate of scores[h][.]       one consumer thread per token
//   out^T[d][h] += V_tile^T[d][t] p[h][t]         mma.sync.m16n8k16, 16 dims per warp
// Three things change from lesson 02:
//  * The gate (reference/gated_reference.h) replaces the online softmax: nothing is
//    normalised, so there is no running max, no running sum and no rescaling of the
//    accumulators. p_t reads r_{t-1} and r_{t-2}, which for the first two tokens of a tile
//    belong to the tile before: the gate keeps them in a two-float `carry` per head.
//  * The stream runs kAhead K tiles ahead of the V tiles: K0 .. K_A, V0, K_{A+1}, V1, K_{A+2},
//    ... (A = kAhead: 3 at one CTA per SM, 2 at two). The consumers compute the gate of tile
//    i (they have its K) before its V tile is issued, which is what lets the later steps
//    copy only the V rows some head needs, and the K tiles issued in between keep the
//    memory busy while the gates run. With one CTA per SM nothing else hides the wait for
//    a gate, and the K tiles run 3 ahead in a 6-slot ring; with two, 2 ahead in a 3-slot
//    ring: at a CTA's start the ring then holds three K tiles instead of two K tiles and an
//    idle slot, whose V tile waits for the first gate (the README says how this was chosen).
//    Step 1 uses the same order, so that the steps differ in the bytes they read and nothing else.
//  * At two CTAs per SM a tile's scores have no buffer of their own: a consumer warp reads
//    only its 16 rows of the K tile, so once its QK is done it writes its scores over them
//    (score_index), and the slot is released when the gate has read them. That is what lets
//    that layout keep three tiles' weights (K 2 ahead) in its shared memory. At one CTA per
//    SM there is room for a scores buffer, and the K slot is released right after QK: the
//    6-slot ring is full there, and its producers wait for the oldest slot.
//  * A producer announces a tile with an asynchronous arrive: the barrier counts the
//    thread's arrival once its copies have landed, so no producer ever waits for its own
//    copies. Lesson 02 announced a tile only after issuing kStages - 2 later ones
//    (cp.async.wait_group); here a later one can be a V tile whose copy waits for the gate
//    of the very K tile not yet announced, and the two would wait for each other.
//  * The copies themselves (Producer::copy_k, copy_v) read no page id from global memory:
//    the CTA's page ids are staged in shared memory once, at the start, when they fit
//    (always, for the lesson's shapes). A global load in front of every tile's copies had
//    held each tile back by one memory round trip, which a ring cannot hide when that
//    load is what the copies wait for. Then, on sm_90 at two CTAs per SM, each row is one
//    bulk copy (cp.async.bulk, the copy engine: producer thread r copies row r, 256 bytes,
//    and counts its bytes on the slot's barrier with arrive.expect_tx); at one CTA per SM,
//    and on sm_80-89, the 16 pieces of a row are 16 cp.async of 16 bytes by 16 threads,
//    announced with cp.async.mbarrier.arrive.noinc. Rows that must read as zeros are
//    written as zeros, without a read. Every copy tells L2 that its lines are read once
//    (evict first, kL2Hints; README: "Staging the copies").
//  * A CTA may serve one KV head of two consecutive sequences as one run of tiles
//    (CtaSeqs, RunProducer; README: "Two sequences per CTA"), so that a grid of more than
//    one wave pays half the CTA starts.
// D is 128 and a CTA serves up to 8 query heads (one 8-wide mma column block): the lesson's
// shapes are H8/Hkv4 and the tests cover groups 1 to 8; other shapes are refused by name.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"

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
// GPUs with 99 KiB a CTA (sm_86, sm_89) fit neither: the variants say so.
constexpr int kSmemLimitOnePerSm = 226 * 1024;
constexpr int kSmemLimitTwoPerSm = 228 * 1024 / 2 - 1024 - 256;

// Dynamic shared memory, in bytes:
//   tiles   [kStages][kTile][kRow]       K or V elements (at two CTAs per SM, a K tile's scores too)
//   scores  [kHeads][kScoreStride]       float: one token tile's scaled scores (one CTA per SM only)
//   p16     [kBufs][kHeads][kPStride]    the weights in the storage type (the mma's B operand):
//                                        a tile's gate runs kAhead tiles before its PV, so
//                                        kAhead + 1 tiles' weights are alive at once
//   rows    [kBufs][kTile]               uint8: which rows to copy (step 2) or the list (steps 3-5)
//   carry   [3][kHeads][2]               float: r_{T-2}, r_{T-1} of the tile before (two buffers),
//                                        and zeros (what a sequence's first tile reads)
//   pages   [kPageSlots]                 int: the CTA's page ids, from its first page on, when they fit
// CTAS_PER_SM 1: a 6-slot ring, K tiles 3 ahead; 2: a 3-slot ring, K tiles 2 ahead. The
// page array takes what the layout's shared memory has left: 976 ids at two CTAs per SM
// (15616 tokens in pages of 16), 2048 at one.
// K tiles ahead at two CTAs per SM (-DLESSON05_TWO_PER_SM_AHEAD=1 or 3 to compare; the
// README's "How far K runs ahead").
#ifndef LESSON05_TWO_PER_SM_AHEAD
#define LESSON05_TWO_PER_SM_AHEAD 2
#endif
static_assert(LESSON05_TWO_PER_SM_AHEAD >= 1 && LESSON05_TWO_PER_SM_AHEAD <= 3,
              "1 to 3 K tiles ahead: with more, the weights of kAhead + 1 tiles no longer fit the two-per-SM layout");

template <int CTAS_PER_SM>
struct Layout {
    static constexpr int kStages = CTAS_PER_SM == 1 ? 6 : 3;
    static constexpr int kAhead = CTAS_PER_SM == 1 ? 3 : LESSON05_TWO_PER_SM_AHEAD;  // K tiles issued before the V tile of the oldest gated tile
    static constexpr int kBufs = kAhead + 1;    // tiles whose weights are alive at once
    static constexpr bool kBulkCopies = CTAS_PER_SM == 2;  // bulk rows where the GPU has them (sm_90), else cp.async
    static constexpr bool kScoresInSlot = CTAS_PER_SM == 2;  // a K tile's scores over the tile, else in `scores`
    static constexpr int kScoreRegion = kScoresInSlot ? kSlotScoreRegion : 0;  // score_index: 0 for the buffer
    static constexpr int kTileBytes = kTileElems * 2;
    static constexpr int kScoreBytes = kScoresInSlot ? 0 : kHeads * kScoreStride * 4;
    static constexpr int kPBytes = kBufs * kHeads * kPStride * 2;
    static constexpr int kRowsBytes = kBufs * kTile;
    static constexpr int kCarryBytes = 3 * kHeads * 2 * 4;
    static constexpr int kSmemLimit = CTAS_PER_SM == 1 ? kSmemLimitOnePerSm : kSmemLimitTwoPerSm;
    static constexpr int kBaseBytes = kStages * kTileBytes + kScoreBytes + kPBytes + kRowsBytes + kCarryBytes;
    static constexpr int kPageSlotsLeft = (kSmemLimit - kBaseBytes) / 4 / 16 * 16;  // whole 64-byte lines of ids
    static constexpr int kPageSlots = kPageSlotsLeft < 2048 ? kPageSlotsLeft : 2048;
    static constexpr int kSmemBytes = kBaseBytes + kPageSlots * 4;
    static_assert(CTAS_PER_SM == 1 || CTAS_PER_SM == 2, "one or two CTAs per SM");
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

template <class scalar_t, int CTAS_PER_SM>
__device__ __forceinline__ Smem<scalar_t> carve_smem(unsigned char* base) {
    using L = Layout<CTAS_PER_SM>;
    Smem<scalar_t> s;
    s.tiles = reinterpret_cast<scalar_t*>(base);
    s.scores = L::kScoresInSlot ? nullptr : reinterpret_cast<float*>(base + L::kStages * L::kTileBytes);
    s.p16 = reinterpret_cast<scalar_t*>(base + L::kStages * L::kTileBytes + L::kScoreBytes);
    s.rows = base + L::kStages * L::kTileBytes + L::kScoreBytes + L::kPBytes;
    s.carry = reinterpret_cast<float*>(s.rows + L::kRowsBytes);
    s.pages = reinterpret_cast<int*>(s.rows + L::kRowsBytes + L::kCarryBytes);
    return s;
}

// The gate's two numbers, passed by value to every kernel.
struct GateArgs {
    float gamma = 1.f;  // scales every weight
    float sigma = 0.f;  // 0 <= sigma < 3: the larger, the more weights are exactly 0
};

// Two L2 hints on every copy of K and V (README: "Staging the copies"; build with
// -DLESSON05_NO_L2_HINTS to compare):
//  * evict first (pa::l2_evict_first_policy): a launch reads each K and V row once, so the
//    lines it fills are the first L2 may evict;
//  * cp.async only: fetch 256 bytes into L2 on a miss (.L2::256B), a whole row, whose 16
//    pieces 16 threads ask for one after another.
#ifdef LESSON05_NO_L2_HINTS
constexpr bool kL2Hints = false;
#else
constexpr bool kL2Hints = true;
#endif

// ---------------------------------------------------------------------------------------
// PTX the copies need beyond common/: a 16-byte cp.async whose source size may be 0 (then
// it reads nothing and writes 16 zero bytes), and the asynchronous arrive on an mbarrier.

__device__ __forceinline__ void cp_async16_or_zero(void* smem_dst, const void* gmem_src, bool copy, uint64_t l2_policy) {
    const unsigned dst = pa::smem_address(smem_dst);
    const unsigned src_bytes = copy ? 16u : 0u;
    if constexpr (kL2Hints)
        asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;" ::"r"(dst),
                     "l"(gmem_src), "r"(src_bytes), "l"(l2_policy)
                     : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem_src), "r"(src_bytes) : "memory");
}

// One bulk row copy (sm_90), evict first where kL2Hints.
__device__ __forceinline__ void bulk_row_copy(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar,
                                              uint64_t l2_policy) {
    if constexpr (kL2Hints)
        pa::bulk_copy_to_shared(smem_dst, gmem_src, bytes, bar, l2_policy);
    else
        pa::bulk_copy_to_shared(smem_dst, gmem_src, bytes, bar);
}

// Counts as one arrival on `bar` once every cp.async this thread has issued so far has
// landed (.noinc: the arrival is one of those the barrier was initialised with).
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(pa::smem_address(bar)) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Whether this build's device code may use bulk copies (LESSON05_CP_ASYNC_ONLY: never, to compare).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(LESSON05_CP_ASYNC_ONLY)
constexpr bool kArchHasBulkCopies = true;
#else
constexpr bool kArchHasBulkCopies = false;
#endif

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

// ---------------------------------------------------------------------------------------
// The producer side. The 128 producer threads copy a K or V tile into a ring slot and
// arrive on the slot's `full` barrier once each (copy_k, copy_v). K tiles are copied whole,
// in token order. A V tile's rows are chosen by the step: copy_v's `token_of(j)` says which
// token of the tile row j of the staged tile holds (-1: a row of zeros); rows j >= num_rows
// are left as they are; `compacted`: the rows are a compacted list (steps 3-5). Two ways to
// copy (kBulk):
//   bulk rows (sm_90, when BULK): producer thread r copies row r of the tile (of a list:
//             row dealt_row()), one 256-byte bulk copy, and arrives with arrive.expect_tx
//             of its bytes; a row of zeros is 16 stores of this thread and a plain arrive.
//   cp.async: thread tid copies the 16-byte piece tid % 16 of rows tid / 16, + 8, ..., + 120
//             (a row of zeros: copies of source size 0, nothing read), then arrives with
//             cp.async.mbarrier.arrive.noinc.
// The kernels ask for bulk rows at two CTAs per SM and for cp.async at one (README: "Staging
// the copies" says how that was chosen). The page ids come from `pages`: shared memory once
// stage_pages has run (when they fit), the block table otherwise.
template <class scalar_t, bool BULK>
struct Producer {
    static constexpr bool kBulk = BULK && kArchHasBulkCopies;
    static constexpr int kPieces = kHeadSize / 8;                    // 16-byte pieces of a row
    static constexpr int kRowsPerPass = kProducerThreads / kPieces;  // cp.async: 8 rows per pass of the producers
    static constexpr int kRowsPerThread = kTile / kRowsPerPass;      // 16
    static constexpr uint32_t kRowBytes = kHeadSize * sizeof(scalar_t);
    static_assert(kProducerThreads % kPieces == 0 && kTile % kRowsPerPass == 0, "every row has one copier per piece");
    static_assert(kProducerThreads == kTile, "bulk rows: one producer thread per row of a tile");

    const scalar_t* k_cache;  // [num_blocks, Hkv, block_size, D]
    const scalar_t* v_cache;
    const int* pages;         // the CTA's page ids from its first page on (shared memory once staged)
    int num_pages;            // entries of `pages` this CTA may read
    int first_page;           // t_begin / block_size
    int block_stride;         // elements between blocks: Hkv * block_size * D
    int head_offset;          // kv_head * block_size * D: where this KV head's rows start in a block
    int block_shift, block_mask;
    int tid, row0, piece;     // this thread; cp.async: its first row and its piece of a row
    int t_begin, t_end;       // the tokens of this CTA: [t_begin, t_end)
    uint64_t l2_policy;       // evict first: K and V are read once (made only where kL2Hints)

    __device__ Producer(int producer_tid, const scalar_t* k, const scalar_t* v, const int* seq_pages, int pages_per_seq,
                        int Hkv, int kv_head, int block_size, int first_token, int end_token)
        : k_cache(k), v_cache(v), tid(producer_tid), l2_policy(kL2Hints ? pa::l2_evict_first_policy() : 0) {
        row0 = tid / kPieces;
        piece = tid % kPieces;
        block_shift = __ffs(block_size) - 1;  // page sizes are powers of two that divide kTile
        block_mask = block_size - 1;
        block_stride = Hkv * block_size * kHeadSize;
        head_offset = kv_head * block_size * kHeadSize;
        t_begin = first_token;  // a multiple of kTile, so every tile starts on a page
        t_end = end_token;
        first_page = t_begin >> block_shift;
        pages = seq_pages + first_page;
        num_pages = pages_per_seq - first_page;
    }

    // Every producer thread calls this once, before its first copy: the producers copy up to
    // `capacity` page ids to smem_pages, and when the CTA's pages all fit, every copy reads
    // its page id there from then on. Otherwise every tile's copies wait for their page ids
    // from global memory (contexts beyond the layout's page array: 8192 tokens in pages of
    // 16 at two CTAs per SM). The ids are read before the context length is known (entries
    // of the table row past the sequence's pages are in bounds, and unused), so the two
    // loads of a CTA's start overlap instead of following each other.
    __device__ __forceinline__ void stage_pages(int* smem_pages, int capacity) {
        const int staged = min(num_pages, capacity);
        for (int i = tid; i < staged; i += kProducerThreads) smem_pages[i] = __ldg(pages + i);
        pa::named_barrier_sync<kProducerBarrier, kProducerThreads>();
        adopt_pages(smem_pages, staged);
    }

    // The same for the two sequences of a CTA that streams two (CtaSeqs), half the array
    // each; their loads are in flight together.
    __device__ __forceinline__ static void stage_pages(Producer& a, Producer& b, int* smem_pages, int capacity) {
        const int half = capacity / 2;
        const int na = min(a.num_pages, half), nb = min(b.num_pages, half);
        for (int i = a.tid; i < max(na, nb); i += kProducerThreads) {
            const int x = i < na ? __ldg(a.pages + i) : 0;
            const int y = i < nb ? __ldg(b.pages + i) : 0;
            if (i < na) smem_pages[i] = x;
            if (i < nb) smem_pages[half + i] = y;
        }
        pa::named_barrier_sync<kProducerBarrier, kProducerThreads>();
        a.adopt_pages(smem_pages, na);
        b.adopt_pages(smem_pages + half, nb);
    }

    // Reads the page ids from `staged` ones at smem_pages from now on, if they are all there.
    __device__ __forceinline__ void adopt_pages(int* smem_pages, int staged) {
        const int needed = ((t_end - 1) >> block_shift) + 1 - first_page;
        if (needed > staged) return;
        pages = smem_pages;
        num_pages = needed;
    }

    // Where token t (< t_end) of this KV head sits: cache[block of t, kv_head, t % block_size, 0 .. D).
    __device__ __forceinline__ const scalar_t* row_of(const scalar_t* cache, int t) const {
        return cache + static_cast<long long>(pages[(t >> block_shift) - first_page]) * block_stride + head_offset +
               (t & block_mask) * kHeadSize;
    }

    // Bulk rows: row `row` of a staged tile as zeros, then this thread's arrival.
    __device__ __forceinline__ void zero_row_and_arrive(scalar_t* row, uint64_t* full) const {
#pragma unroll
        for (int i = 0; i < kPieces; ++i) reinterpret_cast<uint4*>(row)[i] = make_uint4(0u, 0u, 0u, 0u);
        pa::fence_proxy_async_shared();
        pa::mbarrier_arrive(full);
    }

    // K tile `tile` into buf ([kTile][kRow]), then this thread's arrival on `full`. Rows past
    // the end are zeros (an mma multiplies whole 16-row blocks, and a NaN in an unused cache
    // slot times 0 would still be NaN).
    __device__ __forceinline__ void copy_k(scalar_t* buf, int tile, uint64_t* full) const {
        const int tile_start = t_begin + tile * kTile;
        if constexpr (kBulk) {
            const int r = tid;  // this thread's row
            const int t = tile_start + r;
            if (t < t_end) {
                pa::mbarrier_arrive_expect_tx(full, kRowBytes);
                bulk_row_copy(buf + r * kRow, row_of(k_cache, t), kRowBytes, full, l2_policy);
            } else {
                zero_row_and_arrive(buf + r * kRow, full);
            }
        } else {
            buf += row0 * kRow + piece * 8;
#pragma unroll
            for (int k = 0; k < kRowsPerThread; ++k) {
                const int t = tile_start + row0 + k * kRowsPerPass;
                const bool real = t < t_end;
                cp_async16_or_zero(buf + k * kRowsPerPass * kRow, real ? row_of(k_cache, t) + piece * 8 : k_cache, real,
                                   l2_policy);
            }
            cp_async_arrive_noinc(full);
        }
    }

    // Bulk rows of a compacted list: the row this thread copies is 4 * lane + warp (of the
    // four producer warps). A warp's lanes issue their bulk copies one after another (tens of
    // ns each), and a list fills rows 0 .. nnz - 1 only: thread j = row j would put a list of
    // 32 rows on one warp, whose issue then lies between the gate and PV. Dealt, each warp
    // issues a quarter. Rows at their tokens' places (dense, zero-skip) keep thread j = row j:
    // their rows of zeros are stores of the thread, and 4 rows apart the lanes of a quarter
    // warp would write the same banks.
    __device__ __forceinline__ int dealt_row() const {
        constexpr int kWarps = kProducerThreads / 32;
        return tid % 32 * kWarps + tid / 32;
    }

    // V rows of tile `tile` into buf, then this thread's arrival on `full`: row j (<
    // num_rows) holds token token_of(j) of the tile, or zeros where token_of(j) is -1. With
    // cp.async a row of zeros still names a source, which a copy of size 0 does not read:
    // row j's own token (the last one past the end), so that the zero rows of all CTAs do not
    // all name one and the same address.
    template <class TokenOf>
    __device__ __forceinline__ void copy_v(scalar_t* buf, int tile, int num_rows, TokenOf token_of, bool compacted,
                                           uint64_t* full) const {
        const int tile_start = t_begin + tile * kTile;
        if constexpr (kBulk) {
            const int j = compacted ? dealt_row() : tid;  // this thread's row
            const int tok = j < num_rows ? token_of(j) : -1;
            if (tok >= 0) {
                pa::mbarrier_arrive_expect_tx(full, kRowBytes);
                bulk_row_copy(buf + j * kRow, row_of(v_cache, tile_start + tok), kRowBytes, full, l2_policy);
            } else if (j < num_rows) {
                zero_row_and_arrive(buf + j * kRow, full);
            } else {
                pa::mbarrier_arrive(full);
            }
        } else {
            const int n = min(kTile, t_end - tile_start);
            buf += row0 * kRow + piece * 8;
#pragma unroll
            for (int k = 0; k < kRowsPerThread; ++k) {
                const int j = row0 + k * kRowsPerPass;
                if (j >= num_rows) break;  // rows are visited in increasing order
                const int tok = token_of(j);
                const int t = tile_start + (tok >= 0 ? tok : min(j, n - 1));
                cp_async16_or_zero(buf + k * kRowsPerPass * kRow, row_of(v_cache, t) + piece * 8, tok >= 0, l2_policy);
            }
            cp_async_arrive_noinc(full);
        }
    }
};

// The producers of a CTA's run of tiles (CtaSeqs): one Producer per sequence, their page
// ids staged together; copy_k and copy_v take a tile of the run.
template <class scalar_t, bool BULK, int SEQS>
struct RunProducer {
    using P = Producer<scalar_t, BULK>;
    const CtaSeqs<SEQS> w;
    P p0, p1;

    __device__ RunProducer(int tid, const scalar_t* k, const scalar_t* v, const int* block_table, int max_blocks_per_seq,
                           int Hkv, int kv_head, int block_size, const CtaSeqs<SEQS>& seqs, int* smem_pages,
                           int page_slots)
        : w(seqs),
          p0(tid, k, v, block_table + static_cast<size_t>(seqs.seq0) * max_blocks_per_seq, max_blocks_per_seq, Hkv,
             kv_head, block_size, 0, seqs.ctx0),
          p1(tid, k, v, block_table + static_cast<size_t>(seqs.seq1) * max_blocks_per_seq, max_blocks_per_seq, Hkv,
             kv_head, block_size, 0, seqs.ctx1) {
        if (SEQS > 1 && w.count > 1)
            P::stage_pages(p0, p1, smem_pages, page_slots);
        else
            p0.stage_pages(smem_pages, page_slots);
    }

    // Two calls, not a reference to one of the two: the objects stay in registers.
    __device__ __forceinline__ void copy_k(scalar_t* buf, int g, uint64_t* full) const {
        if (w.which(g))
            p1.copy_k(buf, w.local_tile(g), full);
        else
            p0.copy_k(buf, w.local_tile(g), full);
    }
    template <class TokenOf>
    __device__ __forceinline__ void copy_v(scalar_t* buf, int g, int num_rows, TokenOf token_of, bool compacted,
                                           uint64_t* full) const {
        if (w.which(g))
            p1.copy_v(buf, w.local_tile(g), num_rows, token_of, compacted, full);
        else
            p0.copy_v(buf, w.local_tile(g), num_rows, token_of, compacted, full);
    }
};

// ---------------------------------------------------------------------------------------
// The consumer side.

// q of the CTA's heads as the B operand of the QK mma, for all of D, held in registers for
// the whole kernel: qf[ks] = {q[g][16 ks + 2c, +1], q[g][16 ks + 2c + 8, +9]} for head g =
// lane / 4 (zero for heads past the group), c = lane % 4.
template <class scalar_t>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qf)[kHeadSize / 16][2], const scalar_t* q, int seq, int H,
                                                 int first_head, int num_heads, int lane) {
    const int g = lane / 4, c = lane % 4;
    const scalar_t* row = q + (static_cast<size_t>(seq) * H + first_head + g) * kHeadSize + 2 * c;  // q[seq, first_head + g, .]
#pragma unroll
    for (int ks = 0; ks < kHeadSize / 16; ++ks) {
        qf[ks][0] = g < num_heads ? *reinterpret_cast<const uint32_t*>(row + ks * 16) : 0u;
        qf[ks][1] = g < num_heads ? *reinterpret_cast<const uint32_t*>(row + ks * 16 + 8) : 0u;
    }
}

// Asks L2 for q of the CTA's heads of sequence `seq` (a CTA's second sequence: its q is read
// after the first sequence's last QK, long after the start). Warp 0 only; 2 x 128 bytes a head.
template <class scalar_t>
__device__ __forceinline__ void prefetch_q(const scalar_t* q, int seq, int H, int first_head, int num_heads, int lane) {
    const int g = lane / 4, c = lane % 4;  // head g, its 128-byte half c
    if (g < num_heads && c < 2) {
        const scalar_t* row = q + (static_cast<size_t>(seq) * H + first_head + g) * kHeadSize;  // q[seq, first_head + g, .]
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + c * (128 / sizeof(scalar_t))));
    }
}

// Where score (h, t) of a tile lives, in floats from the start of the scores (REGION: the
// layout's kScoreRegion). In a scores buffer (REGION 0), at h * kScoreStride + t. In the K
// slot, in region r = t / 16, the 16 rows of K holding tokens 16 r .. 16 r + 15, which
// the warp that computes their scores read: [kHeads][kScoreHeadStride] floats from the
// region's start, 16 floats further in odd regions (a gate warp's 32 tokens span two
// regions, which then fall on distinct banks).
template <int REGION>
__device__ __forceinline__ int score_index(int h, int t) {
    if constexpr (REGION == 0) {
        return h * kScoreStride + t;
    } else {
        static_assert(REGION % 32 == 0, "regions start on bank 0");
        const int r = t / 16;
        return r * REGION + (r % 2) * 16 + h * kScoreHeadStride + t % 16;
    }
}
static_assert(16 + (kHeads - 1) * kScoreHeadStride + 16 <= kSlotScoreRegion, "a warp's scores fit the rows of K it read");

// Where a K tile's scores go: over the tile itself, or the scores buffer (Layout::kScoresInSlot).
template <class L, class scalar_t>
__device__ __forceinline__ float* scores_of(scalar_t* buf, const Smem<scalar_t>& sm) {
    static_assert(!L::kScoresInSlot || sizeof(scalar_t) == 2, "kSlotScoreRegion counts 16-bit elements");
    return L::kScoresInSlot ? reinterpret_cast<float*>(buf) : sm.scores;
}

// scores[h][t] = scale * (K_tile[t] . q[h]) for the n tokens of a tile: warp w does tokens
// 16 w .. 16 w + 15 (nothing when they are all past the end), at score_index<REGION>. When
// `scores` is buf itself, a warp writes over the rows it read, after a __syncwarp: its
// lanes' mma results need every lane's ldmatrix already, but the sanitizer cannot see that.
template <int REGION, class scalar_t>
__device__ __forceinline__ void qk_tile(float* scores, const scalar_t* buf, const uint32_t (&qf)[kHeadSize / 16][2],
                                        int n, float scale, int warp, int lane) {
    const int mt = warp;
    if (mt * 16 >= n) return;
    float cf[2][4] = {};  // two partial sums: the mma chain is half as long
#pragma unroll
    for (int ks = 0; ks < kHeadSize / 16; ++ks) {
        uint32_t a[4];
        // A: tokens mt*16 + (lane % 16), dims ks*16 + (lane / 16) * 8 .. + 8
        pa::ldmatrix_x4(a, buf + (mt * 16 + lane % 16) * kRow + ks * 16 + lane / 16 * 8);
        pa::mma_16816<scalar_t>(cf[ks % 2], a, qf[ks]);
    }
    const int g = lane / 4, c = lane % 4;
    const int t = mt * 16 + g, h = 2 * c;
    if constexpr (REGION != 0) __syncwarp();  // over the rows: every lane's ldmatrix reads come first
    if (t < n) {
        scores[score_index<REGION>(h, t)] = (cf[0][0] + cf[1][0]) * scale;
        scores[score_index<REGION>(h + 1, t)] = (cf[0][1] + cf[1][1]) * scale;
    }
    if (t + 8 < n) {
        scores[score_index<REGION>(h, t + 8)] = (cf[0][2] + cf[1][2]) * scale;
        scores[score_index<REGION>(h + 1, t + 8)] = (cf[0][3] + cf[1][3]) * scale;
    }
}

// A consumer thread is done with a K tile's slot: it arrives on the slot's `empty` barrier.
// With the scores in the slot, a gate thread is done once its gate has read them
// (release_k_after_gate), the others once they have written theirs (release_k_after_qk),
// and when bulk copies refill the ring, the writes over the tile are first ordered before
// them: the copy engine is another proxy. Without, every consumer is done after its QK.
template <class L>
__device__ __forceinline__ void release_k_slot(uint64_t* empty) {
    if constexpr (L::kScoresInSlot && L::kBulkCopies && kArchHasBulkCopies) pa::fence_proxy_async_shared();
    pa::mbarrier_arrive(empty);
}
template <class L>
__device__ __forceinline__ void release_k_after_qk(uint64_t* empty, int tid) {
    if (!L::kScoresInSlot || tid >= kGateThreads) release_k_slot<L>(empty);
}
template <class L>
__device__ __forceinline__ void release_k_after_gate(uint64_t* empty) {
    if constexpr (L::kScoresInSlot) release_k_slot<L>(empty);
}

// The gate of token t (< kTile) of a tile with n tokens, for every head:
//   r_t = max(s_t, 0),  a_t = (r_t + r_{t-1} + r_{t-2}) / 3,  p_t = gamma * clamp(r_t - sigma * a_t, 0, 1)
// r_{t-1} and r_{t-2} come from the tile's scores (qk_tile), or for t < 2 from carry_in[h] = {r_{T-2},
// r_{T-1}} (T = the tile's first token; zeros before the sequence starts). p is 0 past the
// end and for heads past the group. The last two tokens of a full tile leave their r in
// carry_out for the next tile.
template <int REGION>
__device__ __forceinline__ void gate_token(float (&p)[kHeads], const float* scores, const float* carry_in,
                                           float* carry_out, int t, int n, int num_heads, GateArgs gate) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
        float r0 = 0.f;
        p[h] = 0.f;
        if (h < num_heads && t < n) {
            r0 = fmaxf(scores[score_index<REGION>(h, t)], 0.f);
            const float r1 = t >= 1 ? fmaxf(scores[score_index<REGION>(h, t - 1)], 0.f) : carry_in[2 * h + 1];
            const float r2 = t >= 2 ? fmaxf(scores[score_index<REGION>(h, t - 2)], 0.f) : carry_in[2 * h + t];  // t = 0: r_{T-2}; t = 1: r_{T-1}
            const float a = (r0 + r1 + r2) / static_cast<float>(kFirK);
            p[h] = gate.gamma * fminf(fmaxf(r0 - gate.sigma * a, 0.f), 1.f);
        }
        if (t >= kTile - 2) carry_out[2 * h + t - (kTile - 2)] = r0;
    }
}

// out^T[d][h] += V^T[d][j] p[h][j] over `steps` 16-row steps of a staged V tile; warp w owns
// dims 16 w .. 16 w + 15. acc = {(d g, h 2c), (d g, h 2c+1), (d g+8, h 2c), (d g+8, h 2c+1)}
// with g = lane / 4, c = lane % 4. p16 is [kHeads][kPStride] in the storage type.
template <class scalar_t>
__device__ __forceinline__ void pv_steps(float (&acc)[4], const scalar_t* buf, const scalar_t* p16, int steps, int warp,
                                         int lane) {
    const int mt = warp;
    const int g = lane / 4, c = lane % 4;
    const scalar_t* prow = p16 + g * kPStride + 2 * c;  // head g's weights, rows 2c, 2c + 1 of each step
    for (int ks = 0; ks < steps; ++ks) {
        uint32_t a[4], b[2];
        // A = V^T: rows ks*16 + (lane % 8) + (lane / 16) * 8, dims mt*16 + (lane / 8 % 2) * 8 .. + 8
        pa::ldmatrix_x4_trans(a, buf + (ks * 16 + lane % 8 + lane / 16 * 8) * kRow + mt * 16 + lane / 8 % 2 * 8);
        b[0] = *reinterpret_cast<const uint32_t*>(prow + ks * 16);
        b[1] = *reinterpret_cast<const uint32_t*>(prow + ks * 16 + 8);
        pa::mma_16816<scalar_t>(acc, a, b);
    }
}

// out[seq, first_head + h, d] = acc (nothing to divide by: the gate has no normaliser).
template <class scalar_t>
__device__ __forceinline__ void store_output(scalar_t* out, const float (&acc)[4], int seq, int H, int first_head,
                                             int num_heads, int warp, int lane) {
    const int g = lane / 4, c = lane % 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int d = warp * 16 + g + (e >> 1) * 8, h = 2 * c + (e & 1);
        if (h < num_heads) out[(static_cast<size_t>(seq) * H + first_head + h) * kHeadSize + d] = pa::from_float<scalar_t>(acc[e]);
    }
}

}  // namespace lesson05
