// Lesson 05, step 7 (`dense`): at two CTAs per SM a CTA serves one KV head of two consecutive sequences, as one run of tiles.
//
// What changed since step 6 (step6_bulk_rows.cuh), and why: a grid of more than one wave
// pays a CTA start (barrier setup, the page ids, q, the first K tiles' round trips) per
// (sequence, KV head). With two sequences per CTA (CtaSeqs, RunProducer: grid.y =
// ceil(B / 2), where sparsity.h's seqs_per_cta says so) the producers issue the second
// sequence's first K tiles while the consumers finish the first one's V tiles, the page ids
// of both are staged together, and the second sequence's q is loaded after the first one's
// last QK; the output is stored at each sequence's last V tile (README: "Two sequences per
// CTA"). A build with SEQS = 1 is step 6's kernel. This is the full dense baseline: every V
// row is still copied and multiplied, zero weight or not; the next steps cut bytes from it.
// Run: lesson05_sparse_p [--check | --bench] --variant dense
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t, int CTAS_PER_SM, int SEQS,  // SEQS: sequences per CTA (CtaSeqs)
          int STAGES = default_stages(CTAS_PER_SM)>  // the ring: Layout
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
dense_gated_kernel(scalar_t* __restrict__ out,             // [B, H, D]
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
        // 2. the gate: p16[i % kBufs][h][t] for every token of the tile (0 past the end)
        if (tid < kGateThreads) {
            float p[kHeads];
            gate_token<L::kScoreRegion>(p, scores, sm.carry + (w.starts_sequence(i) ? 2 : (i + 1) % 2) * 2 * kHeads, sm.carry + (i % 2) * 2 * kHeads, tid, n,
                       num_heads, gate);
            release_k_after_gate<L>(&empty[slot]);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) pb[h * kPStride + tid] = pa::from_float<scalar_t>(p[h]);
        }
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // B
    }
}

}  // namespace lesson05
