// Lesson 05, step 10 (`compact_ordered`): the same list, built in token order with warp
// ballots and prefix counts, so the output is the same bits on every run.
//
// What changed since step 9 (step9_compact_atomic.cuh), and why: step 9's list order is
// whatever order the atomics landed in, so two runs on the same input differ in their
// last bits; a server that must reproduce a result, or a test that compares two kernels
// bit for bit, wants the same order every time. (This step is not in the H200 post.) The gate
// threads are four whole warps, one token each, so a warp can count its needed tokens
// without any atomic:
//   mask   = __ballot_sync(~0u, needed)           bit l: lane l's token is needed
//   before = __popc(mask & ((1u << lane) - 1))    needed tokens of the lanes below this one
// Lane 0 of each warp writes its count (__popc(mask)) to warp_count; after barrier B every
// thread adds the counts of the warps below its own, so the slot of a needed token is
// offset + before: the list holds the needed tokens in increasing order, and nnz is the sum
// of the four counts. The slots are now known only after barrier B (step 9 had them before),
// so the gate threads keep their weights in registers across it and write the list then;
// listed, which every consumer arrives on after its writes, orders them for the producers
// and for the PV step. No shared-memory atomic is left; what the step costs against step 9
// is measured in the README.
// Run: lesson05_sparse_p [--check | --bench] --variant compact_ordered
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t, int CTAS_PER_SM, int SEQS,  // SEQS: sequences per CTA (CtaSeqs)
          int STAGES = default_stages(CTAS_PER_SM)>  // the ring: Layout
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
compact_ordered_gated_kernel(scalar_t* __restrict__ out,             // [B, H, D]
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
    __shared__ uint64_t listed[kBufs];  // the list of tile i is in rows[i % kBufs], its length in nnz_of[i % kBufs]
    __shared__ int nnz_of[kBufs];
    // needed tokens of each gate warp in the current tile; on 16 bytes, so that the compiler's
    // wide load of the four counts reads nothing else (nnz_of, written meanwhile)
    __shared__ __align__(16) int warp_count[kGateThreads / 32];
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
                pa::mbarrier_wait(&listed[item.tile % kBufs], (item.tile / kBufs) & 1);
                const uint8_t* list = sm.rows + (item.tile % kBufs) * kTile;  // tokens of the tile some head uses
                const int nnz = nnz_of[item.tile % kBufs];
                producer.copy_v(buf, item.tile, (nnz + 15) / 16 * 16, [&](int j) { return j < nnz ? list[j] : -1; },
                                true, &full[slot]);
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
        if (item.is_v) {  // PV of tile i: the nnz listed rows of its V tile
            pa::mbarrier_wait(&listed[i % kBufs], (i / kBufs) & 1);  // complete long ago: orders nnz_of and the padding
            pv_steps(acc, buf, pb, (nnz_of[i % kBufs] + 15) / 16, warp, lane);
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
        // 2. the gate, and the list: the needed tokens of the tile in increasing order in
        //    rows[i % kBufs], their weights in the same columns of p16[i % kBufs]
        float p[kHeads];
        bool needed = false;
        int before = 0;  // needed tokens of the lanes below this one, in this warp
        if (tid < kGateThreads) {
            gate_token<L::kScoreRegion>(p, scores, sm.carry + (w.starts_sequence(i) ? 2 : (i + 1) % 2) * 2 * kHeads, sm.carry + (i % 2) * 2 * kHeads, tid, n,
                       num_heads, gate);
            release_k_after_gate<L>(&empty[slot]);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) needed |= p[h] != 0.f;
            const unsigned mask = __ballot_sync(0xffffffffu, needed);  // whole warps: kGateThreads % 32 == 0
            before = __popc(mask & ((1u << lane) - 1u));
            if (lane == 0) warp_count[warp] = __popc(mask);
        }
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // B: every warp's count is written
        int nnz = 0, offset = 0;
#pragma unroll
        for (int w = 0; w < kGateThreads / 32; ++w) {
            offset += w < warp ? warp_count[w] : 0;
            nnz += warp_count[w];
        }
        if (needed) {
            const int slot = offset + before;
            sm.rows[(i % kBufs) * kTile + slot] = static_cast<uint8_t>(tid);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) pb[h * kPStride + slot] = pa::from_float<scalar_t>(p[h]);
        }
        // the weights of rows nnz .. round16(nnz) - 1, which the last mma step reads, are 0
        if (tid >= nnz && tid < (nnz + 15) / 16 * 16) {
#pragma unroll
            for (int h = 0; h < kHeads; ++h) pb[h * kPStride + tid] = pa::from_float<scalar_t>(0.f);
        }
        if (tid == 0) nnz_of[i % kBufs] = nnz;
        pa::mbarrier_arrive(&listed[i % kBufs]);  // the list is complete: the producers may copy V_i
    }
}

}  // namespace lesson05
