// Lesson 05, step 8 (`zero_skip`): a V row whose weights are all 0 is not copied.
//
// What changed since step 7 (step7_dense.cuh), and why: the H200 post's first use of the
// gate's zeros was `if (p == 0) continue;` in its PV loop, skipping the V load and the
// multiply of a zero weight; the branch is uniform because every thread reads the same p.
// Here the V load is the producers' job, so that is where the branch goes: the gate marks
// each token whose weight is non-zero for at least one head of the CTA (rows[i % kBufs][t]:
// with GQA a V row serves every head of the group, and is needed if any of them uses it),
// the consumers announce the marks on an mbarrier, listed[i % kBufs], and the producers,
// before copying V_i, wait for it and copy only the marked rows. An unmarked row is filled
// with zeros (cp.async: copies of source size 0; bulk rows: its thread's stores, no copy),
// so the PV step is unchanged: it still runs over all 128 rows, multiplying the zeros by
// zero weights. With cp.async the branch is uniform for the 16 lanes that copy one row.
//
// The consumers can mark tile i before V_i is issued because K tiles run kAhead ahead of V
// tiles in the stream: the consumers gate tile i as soon as K_i lands, and the producers
// reach V_i kAhead K tiles later. A consumer arrives on listed[i % kBufs] once its marks are
// written; the producers wait for use i / kBufs of it. Neither side can lap the other: the
// consumers mark tile i + kBufs only after K_{i+kBufs} has landed, which the producers issue
// right after V_i.
// Run: lesson05_sparse_p [--check | --bench] --variant zero_skip
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t, int CTAS_PER_SM, int SEQS,  // SEQS: sequences per CTA (CtaSeqs)
          int STAGES = default_stages(CTAS_PER_SM)>  // the ring: Layout
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
zero_skip_gated_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                       const scalar_t* __restrict__ q,         // [B, H, D]
                       const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                       const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                       const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                       const int* __restrict__ context_lens,   // [B]
                       int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale, GateArgs gate,
                       int B) {
    using L = Layout<CTAS_PER_SM, STAGES>;
    constexpr int kStages = L::kStages;
    constexpr int kBufs = L::kBufs;
    const int kv_head = blockIdx.x;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= kHeads
    const CtaSeqs<SEQS> w(context_lens, B);  // this CTA's sequences: one run of w.total tiles

    extern __shared__ __align__(16) unsigned char smem[];
    const Smem<scalar_t> sm = carve_smem<scalar_t, CTAS_PER_SM, STAGES>(smem);
    __shared__ uint64_t full[kStages], empty[kStages];
    __shared__ uint64_t listed[kBufs];  // the marks of tile i are in rows[i % kBufs]
    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
        for (int b = 0; b < kBufs; ++b) pa::mbarrier_init(&listed[b], kConsumerThreads);
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if (threadIdx.x >= kConsumerThreads) {
        // Producers: stream position s uses slot s % kStages once the consumers have
        // released its previous tile (use s / kStages - 1 of `empty`).
        RunProducer<scalar_t, L::kBulkCopies, SEQS> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache, block_table,
                                                       max_blocks_per_seq, Hkv, kv_head, block_size, w, sm.pages,
                                                       L::kPageSlots);
        for (int s = 0; s < 2 * w.total; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            scalar_t* buf = sm.tiles + slot * kTileElems;
            const StreamItem item = stream_item<L::kAhead>(s, w.total);
            if (!item.is_v) {
                producer.copy_k(buf, item.tile, &full[slot]);
            } else {
                const int n = w.tokens_in(item.tile);
                pa::mbarrier_wait(&listed[item.tile % kBufs], (item.tile / kBufs) & 1);
                const uint8_t* marks = sm.rows + (item.tile % kBufs) * kTile;  // 1: some head uses the row
                producer.copy_v(buf, item.tile, kTile, [&](int j) { return j < n && marks[j] ? j : -1; }, false,
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
    load_q_fragments(qf, q, w.seq0, H, first_head, num_heads, lane);
    if (SEQS > 1 && w.count > 1 && warp == 0) prefetch_q(q, w.seq1, H, first_head, num_heads, lane);
    if (tid < 3 * kHeads * 2) sm.carry[tid] = 0.f;  // carry[2] stays 0: r before a sequence's first token
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < 2 * w.total; ++s) {
        const int slot = s % kStages;
        const StreamItem item = stream_item<L::kAhead>(s, w.total);
        const int i = item.tile;
        scalar_t* pb = sm.p16 + (i % kBufs) * kHeads * kPStride;  // p16[i % kBufs]: [kHeads][kPStride]
        pa::mbarrier_wait(&full[slot], (s / kStages) & 1);
        scalar_t* buf = sm.tiles + slot * kTileElems;
        if (item.is_v) {  // PV of tile i: every row of its V tile
            pv_steps(acc, buf, pb, kTile / 16, warp, lane);
            release_slot<L>(&empty[slot]);
            if (w.ends_sequence(i)) {  // the last V tile of a sequence: its output is complete
                store_output(out, acc, w.seq_of(i), H, first_head, num_heads, warp, lane);
                acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
            }
            continue;
        }
        // 1. scores of tile i
        const int n = w.tokens_in(i);  // tokens of this tile
        float* scores = scores_of<L>(buf, sm);  // in this K slot, or the scores buffer (score_index)
        qk_tile<L::kScoreRegion>(scores, buf, qf, n, scale, warp, lane);
        // the first sequence's last QK is done: the second one's q loads while this tile's gate runs
        if (SEQS > 1 && w.count > 1 && i + 1 == w.tiles0) load_q_fragments(qf, q, w.seq1, H, first_head, num_heads, lane);
        release_k_after_qk<L>(&empty[slot], tid);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // A
        // 2. the gate: p16[i % kBufs][h][t] for every token of the tile (0 past the end), and
        //    the mark of each token: does any head of the CTA need its V row?
        if (tid < kGateThreads) {
            float p[kHeads];
            gate_token<L::kScoreRegion>(p, scores, sm.carry + (w.starts_sequence(i) ? 2 : (i + 1) % 2) * 2 * kHeads, sm.carry + (i % 2) * 2 * kHeads, tid, n,
                       num_heads, gate);
            release_k_after_gate<L>(&empty[slot]);
            bool needed = false;
#pragma unroll
            for (int h = 0; h < kHeads; ++h) {
                pb[h * kPStride + tid] = pa::from_float<scalar_t>(p[h]);
                needed |= p[h] != 0.f;
            }
            sm.rows[(i % kBufs) * kTile + tid] = needed;
        }
        pa::mbarrier_arrive(&listed[i % kBufs]);  // this thread's marks are written: the producers may copy V_i
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // B
    }
}

}  // namespace lesson05
