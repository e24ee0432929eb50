// Lesson 03, step 5: unit copies (sm_90): the producers copy each 16-token unit of a page with one
// bulk copy instead of 16-byte cp.async pieces.
//
// What changed since step 4 (step4_longest_first.cuh), and why: with partitions the tile
// loop is short, and the producers' per-piece address arithmetic and cp.async issue is a
// larger share of it. UNITS takes lesson 02's step 12 producers (UnitProducer: one
// cp.async.bulk per 16-token unit, 8 at D 256, completing on the slot's mbarrier); the
// consumers read the tile in the units' order (RowOrder vs lesson02::UnitTile: slot s is row
// s / 8 of unit s % 8) and give slots past the partition's end the logit -inf, so the softmax
// runs over the whole tile. Needs sm_90 (cp.async.bulk) and pages of at least one 16-token
// unit at D 64 and 128; elsewhere the step is refused and step 4 runs. Built with UNITS = true
// only (UNITS = false is step 4's kernel).
// Run: lesson03_split_k [--check | --bench] [--shape NAME] --variant unit_copies
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "mbarrier.cuh"
#include "mma.cuh"
#include "partition_layout.cuh"  // MmaLayout, TileProducer, the thread counts
#include "split_plan.h"
#include "split_reduce.cuh"  // merge_partitions
#include "step12_unit_copies.cuh"  // lesson 02: UnitTile, UnitProducer
#include "step4_longest_first.cuh"  // partition_tokens, cta_cell

namespace lesson03 {

// The order in which the mma reads a staged tile: slot s is row s (TileProducer's tiles), or
// lesson 02's step 12 order (UnitProducer's tiles: row s / 8 of unit s % 8).
template <int HEAD_SIZE>
struct RowOrder {
    __host__ __device__ static constexpr int slot_offset(int s) { return s * tile_row_elems(HEAD_SIZE); }
    __host__ __device__ static constexpr int token_of(int s) { return s; }
};

// UNITS producers: lesson 02's step 12 loop over the partition's tokens [t_begin, t_end), its
// pages handed over as a sequence of their own (t_begin is a multiple of 32 tokens, so of
// the page size too). Producer thread `tid`; ring [kStages][kTile][kRow] with its barriers.
template <class scalar_t, int HEAD_SIZE, int kStages>
__device__ __forceinline__ void run_unit_producers(int tid, const scalar_t* k_cache, const scalar_t* v_cache,
                                                   const int* seq_pages, int Hkv, int kv_head, int block_size, int t_begin,
                                                   int t_end, scalar_t* tiles, uint64_t* full, uint64_t* empty) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies: sm_90 (why_not keeps other GPUs away)
    constexpr int kTileElems = tile_tokens(HEAD_SIZE) * tile_row_elems(HEAD_SIZE);
    const int num_stream_tiles = 2 * ((t_end - t_begin + tile_tokens(HEAD_SIZE) - 1) / tile_tokens(HEAD_SIZE));
    lesson02::UnitProducer<scalar_t, HEAD_SIZE> producer(tid, k_cache, v_cache, seq_pages + t_begin / block_size, Hkv,
                                                         kv_head, block_size, t_end - t_begin);
    for (int s = 0; s < num_stream_tiles; ++s) {
        const int slot = s % kStages;
        if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
        producer.issue(tiles + slot * kTileElems, s, &full[slot]);
    }
#else
    __trap();
#endif
}

// Grid (Hkv, B, max_partitions): blockIdx.z is the partition (or cta_cell's, with an order
// table: a longest-first plan). FUSED: the last partition CTA
// of a (sequence, KV head) to finish merges; counters [B * Hkv] start at 0 and are left at 0.
// UNITS (sm_90): lesson 02's step 12 producers, one bulk copy per 16-token unit of a page; the
// consumers read the tile in its unit order and give slots past the partition's end -inf.
template <class scalar_t, int HEAD_SIZE, int HEADS_PER_CTA, int CTAS_PER_SM, bool FUSED, bool UNITS>
__global__ void __launch_bounds__(kMmaThreads, CTAS_PER_SM)
split_k_partition_kernel(scalar_t* __restrict__ out,             // [B, H, D] (FUSED only)
                         const scalar_t* __restrict__ q,         // [B, H, D]
                         const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                         const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                         const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                         const int* __restrict__ context_lens,   // [B]
                         int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale,
                         int partition_size, int splits, SplitScratch scratch,
                         unsigned* __restrict__ counters,        // [B * Hkv] (FUSED only)
                         const int2* __restrict__ cell_order) {  // [max_partitions][B] or nullptr (cta_cell)
    using L = MmaLayout<HEAD_SIZE, HEADS_PER_CTA, CTAS_PER_SM>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kStages;
    using Order = std::conditional_t<UNITS, lesson02::UnitTile<HEAD_SIZE>, RowOrder<HEAD_SIZE>>;

    const int2 cell = cta_cell(cell_order);
    const int seq = cell.x;
    const int kv_head = blockIdx.x;
    const int part = cell.y;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int part_tokens = partition_tokens(ctx, partition_size, splits);
    const int t_begin = part * part_tokens;
    const int t_end = min(ctx, t_begin + part_tokens);
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int num_stream_tiles = 2 * ((t_end - t_begin + kTile - 1) / kTile);  // K0 V0 K1 V1 ...
    // this CTA's state of head h: scratch.m[seq][first_head + h][part] (and l, acc alike)
    const size_t scratch_row = (static_cast<size_t>(seq) * H + first_head) * scratch.max_partitions + part;
    __shared__ unsigned arrived;  // FUSED: how many partitions of this (sequence, KV head) were done before this one
    auto merge_if_last = [&]() {
        if constexpr (FUSED) {
            __threadfence();  // this thread's scratch writes are visible device-wide before the count says so
            pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer has written and fenced
            if (threadIdx.x == 0) arrived = atomicAdd(counters + seq * Hkv + kv_head, 1u);
            pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
            if (arrived != gridDim.z - 1) return;  // another partition of this (sequence, KV head) merges
            __threadfence();  // the others' scratch, seen through the count, is read after it
            merge_partitions<scalar_t, HEAD_SIZE>(out, scratch, seq, H, first_head, num_heads, threadIdx.x, kConsumerThreads);
            if (threadIdx.x == 0) counters[seq * Hkv + kv_head] = 0;  // ready for the next launch
        }
    };

    if (t_begin >= ctx) {  // past the sequence's end: the sentinel, and nothing to read
        if (threadIdx.x >= kConsumerThreads) return;
        for (int i = threadIdx.x; i < num_heads * (HEAD_SIZE + 2); i += kConsumerThreads) {
            const int h = i / (HEAD_SIZE + 2), j = i % (HEAD_SIZE + 2);
            const size_t r = scratch_row + static_cast<size_t>(h) * scratch.max_partitions;
            if (j == HEAD_SIZE) scratch.m[r] = -INFINITY;
            else if (j == HEAD_SIZE + 1) scratch.l[r] = 0.f;
            else scratch.acc[r * HEAD_SIZE + j] = 0.f;
        }
        merge_if_last();
        return;
    }

    extern __shared__ __align__(16) float smem[];
    scalar_t* tiles = reinterpret_cast<scalar_t*>(smem);                        // [kStages][kTile][kRow]
    scalar_t* q_tile = tiles + kStages * kTile * kRow;                          // [HEADS_PER_CTA][kRow]
    float* logit_bufs = reinterpret_cast<float*>(q_tile + HEADS_PER_CTA * kRow);      // [2][HEADS_PER_CTA][kTile + 8]
    __shared__ float m_run[HEADS_PER_CTA], l_run[HEADS_PER_CTA], alpha[HEADS_PER_CTA];
    __shared__ float red_max[kConsumerWarps], red_sum[kConsumerWarps];
    __shared__ uint64_t full[kStages], empty[kStages];

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if constexpr (UNITS) {
        if (threadIdx.x >= kConsumerThreads) {
            run_unit_producers<scalar_t, HEAD_SIZE, kStages>(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages,
                                                             Hkv, kv_head, block_size, t_begin, t_end, tiles, full, empty);
            return;  // the consumers wait for every byte before the CTA ends
        }
    }
    if (threadIdx.x >= kConsumerThreads) {
        // Producers. Slot s % kStages is reused once the consumers have released its previous
        // tile (use s / kStages - 1 of `empty`). A producer announces tile s - kLag once its
        // cp.async group has landed: the wait covers the thread's own copies only, which is
        // why `full` counts every producer. kLag = kStages - 2 leaves one slot free, so the
        // next copy is issued while the consumers work on the tile just announced (with
        // kLag = kStages - 1 the producer waits for them, which measured slower).
        constexpr int kLag = kStages - 2;
        TileProducer<scalar_t, HEAD_SIZE> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages, Hkv,
                                                   kv_head, block_size, t_begin, t_end);
        for (int s = 0; s < num_stream_tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            producer.issue(tiles + slot * kTile * kRow, s);
            if (s >= kLag) {
                pa::cp_async_wait<kLag>();
                pa::mbarrier_arrive(&full[(s - kLag) % kStages]);
            }
        }
        pa::cp_async_wait<0>();
        for (int s = max(0, num_stream_tiles - kLag); s < num_stream_tiles; ++s) pa::mbarrier_arrive(&full[s % kStages]);
        return;
    }

    // Consumers. q rows of the group, 16 bytes at a time: q_tile[h][d] = q[seq, first_head + h, d]
    constexpr int kPiecesPerRow = HEAD_SIZE / 8;
    for (int i = threadIdx.x; i < HEADS_PER_CTA * kPiecesPerRow; i += kConsumerThreads) {
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
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();

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
        const int slot = s % kStages;
        pa::mbarrier_wait(&full[slot], (s / kStages) & 1);
        const scalar_t* buf = tiles + slot * kTile * kRow;                // [kTile][kRow] in Order, V rows past the end are zero
        const int n = min(kTile, t_end - t_begin - s / 2 * kTile);        // tokens of this token tile
        float* logits = logit_bufs + (s / 2 % 2) * L::kLogitFloats;       // [HEADS_PER_CTA][kTile + 8]

        if (s % 2 == 0) {
            // 1. logits[h][t] = scale * (K_tile[t] . q[h]), one 16-token x 8-head block per warp and step.
            for (int item = warp; item < L::kQkItems; item += kConsumerWarps) {
                const int mt = item % L::kKSteps, nt = item / L::kKSteps;
                if (!UNITS && mt * 16 >= n) continue;  // the whole block is past the sequence's end
                float cf[2][4] = {};         // two partial sums: the mma chain is half as long
#pragma unroll
                for (int ks = 0; ks < HEAD_SIZE / 16; ++ks) {
                    uint32_t a[4], b[2];
                    // A: slots mt*16 + (lane % 16), dims ks*16 + (lane / 16) * 8 .. + 8
                    pa::ldmatrix_x4(a, buf + Order::slot_offset(mt * 16 + lane % 16) + ks * 16 + lane / 16 * 8);
                    // B: heads nt*8 + (lane % 8), dims ks*16 + (lane / 8 % 2) * 8 .. + 8
                    pa::ldmatrix_x2(b, q_tile + (nt * 8 + lane % 8) * kRow + ks * 16 + lane / 8 % 2 * 8);
                    pa::mma_16816<scalar_t>(cf[ks % 2], a, b);
                }
                // logits are kept by slot; a slot whose token is past the end gets -inf (UNITS:
                // the softmax runs over the whole tile, and gives it p = 0)
                const int t = mt * 16 + g, h = nt * 8 + 2 * c;
                float* row0 = logits + h * L::kLogitStride;  // logits[h][.], then logits[h + 1][.]
                const bool on0 = Order::token_of(t) < n, on8 = Order::token_of(t + 8) < n;
                row0[t] = on0 ? (cf[0][0] + cf[1][0]) * scale : -INFINITY;
                row0[L::kLogitStride + t] = on0 ? (cf[0][1] + cf[1][1]) * scale : -INFINITY;
                row0[t + 8] = on8 ? (cf[0][2] + cf[1][2]) * scale : -INFINITY;
                row0[L::kLogitStride + t + 8] = on8 ? (cf[0][3] + cf[1][3]) * scale : -INFINITY;
            }
            pa::release_slot(&empty[slot]);  // this thread is done with the K tile (fence, arrive)
            continue;
        }

        // 2. Every warp has written its logits: the softmax step with the tile as the chunk
        //    (one warp per head), then every output block is rescaled by its heads' alpha.
        //    Writing the next token tile's logits cannot disturb this one's p (the other
        //    buffer), and the token tile after that waits at this barrier of the next tile,
        //    which every warp reaches only after its PV here.
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        chunk_softmax<HEADS_PER_CTA, kConsumerWarps>(logits, L::kLogitStride, UNITS ? kTile : n, num_heads, m_run, l_run,
                                                     alpha, red_max, red_sum);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
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
                const bool in0 = UNITS || t < n, in1 = UNITS || t + 1 < n;  // UNITS: p = 0 past the end already
                return pa::pack2(head_on && in0 ? pp.x : 0.f, head_on && in1 ? pp.y : 0.f, scalar_t{});
            };
#pragma unroll
            for (int kk = 0; kk < L::kKStepsPerSplit; ++kk) {  // steps past the end add zeros: no early exit
                const int ks = pv_split * L::kKStepsPerSplit + kk;
                uint32_t a[4], b[2];
                // A = V^T: slots ks*16 + (lane % 8) + (lane / 16) * 8, dims mt*16 + (lane / 8 % 2) * 8 .. + 8
                pa::ldmatrix_x4_trans(a, buf + Order::slot_offset(ks * 16 + lane % 8 + lane / 16 * 8) + mt * 16 + lane / 8 % 2 * 8);
                const int t = ks * 16 + 2 * c;
                b[0] = p_pair(t);
                b[1] = p_pair(t + 8);
                pa::mma_16816<scalar_t>(acc[j], a, b);
            }
        }
        pa::release_slot(&empty[slot]);  // this thread is done with the V tile (fence, arrive)
    }

    // 4. Splits 1.. hand their partial sums to split 0 through the ring, which writes this
    //    partition's state, not divided by l: acc[seq][first_head + h][part][d], m and l.
    //    The ring is idle: the consumers waited for every tile the producers copied, and the
    //    producers copy nothing more.
    float* partials = smem;  // [kPvSplit - 1][HEADS_PER_CTA][HEAD_SIZE]
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer is done with the ring; m_run, l_run are final
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
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
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
                    scratch.acc[(scratch_row + static_cast<size_t>(he) * scratch.max_partitions) * HEAD_SIZE + de] = o;
            }
        }
    }
    if (threadIdx.x < num_heads) {
        scratch.m[scratch_row + static_cast<size_t>(threadIdx.x) * scratch.max_partitions] = m_run[threadIdx.x];
        scratch.l[scratch_row + static_cast<size_t>(threadIdx.x) * scratch.max_partitions] = l_run[threadIdx.x];
    }
    merge_if_last();
}

}  // namespace lesson03
