// Lesson 05's copies: how the producer warps fill the ring (gated_layout.cuh) with K and V
// rows from the paged cache. Step 1 uses the PlainProducer, every later step the Producer,
// and a step chooses only which V rows a tile needs (Producer::copy_v's token_of).
//
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
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "gated_layout.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"

namespace lesson05 {

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

template <bool HINTS = kL2Hints>
__device__ __forceinline__ void cp_async16_or_zero(void* smem_dst, const void* gmem_src, bool copy, uint64_t l2_policy) {
    const unsigned dst = pa::smem_address(smem_dst);
    const unsigned src_bytes = copy ? 16u : 0u;
    if constexpr (HINTS)
        asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;" ::"r"(dst),
                     "l"(gmem_src), "r"(src_bytes), "l"(l2_policy)
                     : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem_src), "r"(src_bytes) : "memory");
}

// One bulk row copy (sm_90), evict first where HINTS.
template <bool HINTS = kL2Hints>
__device__ __forceinline__ void bulk_row_copy(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar,
                                              uint64_t l2_policy) {
    if constexpr (HINTS)
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
// Step 1's producer, the plainest: thread tid copies the 16-byte piece tid % 16 of rows
// tid / 16, + 8, ..., + 120 of a K or V tile with cp.async, reading each row's page id from
// the block table, and writes rows past the end as zeros (an mma multiplies whole 16-row
// blocks, and a NaN in an unused cache slot times 0 would still be NaN). No L2 hints; the
// caller announces the copies once they have landed (cp.async.wait_group, then an arrive).
template <class scalar_t>
struct PlainProducer {
    static constexpr int kPieces = kHeadSize / 8;                    // 16-byte pieces of a row
    static constexpr int kRowsPerPass = kProducerThreads / kPieces;  // 8 rows per pass of the producers
    static constexpr int kRowsPerThread = kTile / kRowsPerPass;      // 16
    const int* pages;  // the sequence's row of the block table
    int block_stride, head_offset, block_shift, block_mask;
    int row0, piece, ctx;

    __device__ PlainProducer(int tid, const int* seq_pages, int Hkv, int kv_head, int block_size, int context_len)
        : pages(seq_pages), row0(tid / kPieces), piece(tid % kPieces), ctx(context_len) {
        block_shift = __ffs(block_size) - 1;  // page sizes are powers of two
        block_mask = block_size - 1;
        block_stride = Hkv * block_size * kHeadSize;
        head_offset = kv_head * block_size * kHeadSize;
    }

    // Tile `tile` of `cache` (K or V) into buf ([kTile][kRow]), as one cp.async group.
    __device__ __forceinline__ void copy(scalar_t* buf, const scalar_t* cache, int tile) const {
        buf += row0 * kRow + piece * 8;
#pragma unroll
        for (int k = 0; k < kRowsPerThread; ++k) {
            const int t = tile * kTile + row0 + k * kRowsPerPass;
            scalar_t* dst = buf + k * kRowsPerPass * kRow;
            if (t < ctx)
                pa::cp_async16(dst, cache + static_cast<long long>(__ldg(pages + (t >> block_shift))) * block_stride +
                                        head_offset + (t & block_mask) * kHeadSize + piece * 8);
            else
                *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
        }
        pa::cp_async_commit();
    }
};

// ---------------------------------------------------------------------------------------
// The producer side. The 128 producer threads copy a K or V tile into a ring slot and
// arrive on the slot's `full` barrier once each (copy_k, copy_v). K tiles are copied whole,
// in token order. A V tile's rows are chosen by the step: copy_v's `token_of(j)` says which
// token of the tile row j of the staged tile holds (-1: a row of zeros); rows j >= num_rows
// are left as they are; `compacted`: the rows are a compacted list (steps 9-11). Two ways to
// copy (kBulk):
//   bulk rows (sm_90, when BULK): producer thread r copies row r of the tile (of a list:
//             row dealt_row()), one 256-byte bulk copy, and arrives with arrive.expect_tx
//             of its bytes; a row of zeros is 16 stores of this thread and a plain arrive.
//   cp.async: thread tid copies the 16-byte piece tid % 16 of rows tid / 16, + 8, ..., + 120
//             (a row of zeros: copies of source size 0, nothing read), then arrives with
//             cp.async.mbarrier.arrive.noinc.
// The kernels ask for bulk rows at two CTAs per SM and for cp.async at one (README: "Staging
// the copies" says how that was chosen). The page ids come from `pages`: shared memory once
// stage_pages has run (when they fit), the block table otherwise. HINTS: the L2 hints
// (kL2Hints; steps 2 and 3 copy without them).
template <class scalar_t, bool BULK, bool HINTS = kL2Hints>
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
    uint64_t l2_policy;       // evict first: K and V are read once (made only where HINTS)

    __device__ Producer(int producer_tid, const scalar_t* k, const scalar_t* v, const int* seq_pages, int pages_per_seq,
                        int Hkv, int kv_head, int block_size, int first_token, int end_token)
        : k_cache(k), v_cache(v), tid(producer_tid), l2_policy(HINTS ? pa::l2_evict_first_policy() : 0) {
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
                bulk_row_copy<HINTS>(buf + r * kRow, row_of(k_cache, t), kRowBytes, full, l2_policy);
            } else {
                zero_row_and_arrive(buf + r * kRow, full);
            }
        } else {
            buf += row0 * kRow + piece * 8;
#pragma unroll
            for (int k = 0; k < kRowsPerThread; ++k) {
                const int t = tile_start + row0 + k * kRowsPerPass;
                const bool real = t < t_end;
                cp_async16_or_zero<HINTS>(buf + k * kRowsPerPass * kRow, real ? row_of(k_cache, t) + piece * 8 : k_cache, real,
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
                bulk_row_copy<HINTS>(buf + j * kRow, row_of(v_cache, tile_start + tok), kRowBytes, full, l2_policy);
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
                cp_async16_or_zero<HINTS>(buf + k * kRowsPerPass * kRow, row_of(v_cache, t) + piece * 8, tok >= 0, l2_policy);
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

}  // namespace lesson05
