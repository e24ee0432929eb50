// Lesson 05, step 6 (`bulk_rows`): on sm_90, at two CTAs per SM, each K or V row is one bulk copy.
//
// What changed since step 5 (step5_scores_in_slot.cuh), and why: where the GPU has the copy
// engine's bulk copies (sm_90) and the layout is the two-per-SM one (Layout::kBulkCopies),
// producer thread r copies row r of a tile with one 256-byte cp.async.bulk and counts its
// bytes on the slot's barrier (arrive.expect_tx), in place of 16 cp.async of 16 bytes by 16
// threads; a row of zeros is 16 stores of its thread. At one CTA per SM, and on sm_80-89,
// the copies stay cp.async (the README's "Staging the copies" says how that was chosen).
// Run: lesson05_sparse_p [--check | --bench] --variant bulk_rows
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t, int CTAS_PER_SM, int STAGES = default_stages(CTAS_PER_SM)>  // the ring: Layout
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
bulk_rows_kernel(scalar_t* __restrict__ out,             // [B, H, D]
            const scalar_t* __restrict__ q,         // [B, H, D]
            const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
            const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
            const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
            const int* __restrict__ context_lens,   // [B]
            int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale, GateArgs gate) {
    using L = Layout<CTAS_PER_SM, STAGES>;
    constexpr int kStages = L::kStages;
    constexpr int kBufs = L::kBufs;
    const int kv_head = blockIdx.x;
    const int seq = blockIdx.y;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= kHeads
    const int ctx = context_lens[seq];
    const int tiles = (ctx + kTile - 1) / kTile;

    extern __shared__ __align__(16) unsigned char smem[];
    const Smem<scalar_t> sm = carve_smem<scalar_t, CTAS_PER_SM, STAGES>(smem);
    __shared__ uint64_t full[kStages], empty[kStages];
    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if (threadIdx.x >= kConsumerThreads) {
        // Producers: stream position s uses slot s % kStages once the consumers have
        // released its previous tile (use s / kStages - 1 of `empty`).
        Producer<scalar_t, L::kBulkCopies> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache,
                                                    block_table + static_cast<size_t>(seq) * max_blocks_per_seq,
                                                    max_blocks_per_seq, Hkv, kv_head, block_size, 0, ctx);
        producer.stage_pages(sm.pages, L::kPageSlots);  // the page ids, into shared memory
        for (int s = 0; s < 2 * tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            scalar_t* buf = sm.tiles + slot * kTileElems;
            const StreamItem item = stream_item<L::kAhead>(s, tiles);
            if (!item.is_v) {
                producer.copy_k(buf, item.tile, &full[slot]);
            } else {
                const int n = min(kTile, ctx - item.tile * kTile);
                producer.copy_v(buf, item.tile, kTile, [&](int j) { return j < n ? j : -1; }, false,  // every row
                                &full[slot]);
            }
        }
        cp_async_wait_all();
        return;
    }

    // Consumers.
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int tid = threadIdx.x;
    uint32_t qf[kHeadSize / 16][2];
    load_q_fragments(qf, q, seq, H, first_head, num_heads, lane);
    if (tid < 3 * kHeads * 2) sm.carry[tid] = 0.f;  // carry[2] stays 0: r before the sequence's first token
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < 2 * tiles; ++s) {
        const int slot = s % kStages;
        const StreamItem item = stream_item<L::kAhead>(s, tiles);
        const int i = item.tile;
        scalar_t* pb = sm.p16 + (i % kBufs) * kHeads * kPStride;  // p16[i % kBufs]: [kHeads][kPStride]
        pa::mbarrier_wait(&full[slot], (s / kStages) & 1);
        scalar_t* buf = sm.tiles + slot * kTileElems;
        if (item.is_v) {  // PV of tile i: every row of its V tile
            pv_steps(acc, buf, pb, kTile / 16, warp, lane);
            release_slot<L>(&empty[slot]);
            continue;
        }
        // 1. scores of tile i
        const int n = min(kTile, ctx - i * kTile);  // tokens of this tile
        float* scores = scores_of<L>(buf, sm);  // in this K slot, or the scores buffer (score_index)
        qk_tile<L::kScoreRegion>(scores, buf, qf, n, scale, warp, lane);
        release_k_after_qk<L>(&empty[slot], tid);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // A
        // 2. the gate: p16[i % kBufs][h][t] for every token of the tile (0 past the end); the
        //    carry of tile i is read from buffer (i + 1) % 2 (buffer 2, zeros, for the first)
        //    and written to buffer i % 2
        if (tid < kGateThreads) {
            float p[kHeads];
            gate_token<L::kScoreRegion>(p, scores, sm.carry + (i == 0 ? 2 : (i + 1) % 2) * 2 * kHeads,
                                        sm.carry + (i % 2) * 2 * kHeads, tid, n, num_heads, gate);
            release_k_after_gate<L>(&empty[slot]);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) pb[h * kPStride + tid] = pa::from_float<scalar_t>(p[h]);
        }
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // B
    }
    store_output(out, acc, seq, H, first_head, num_heads, warp, lane);
}

}  // namespace lesson05
