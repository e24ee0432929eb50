// Lesson 05, step 9 (`compact_atomic`): the needed V rows are compacted into a list; the
// copy and the PV step walk only the list.
//
// What changed since step 8 (step8_zero_skip.cuh), and why: step 8 still stages 128 rows per
// V tile and multiplies all of them, zeros included; the H200 post's answer was compaction:
// build the list of non-zero positions in shared memory with atomicAdd, then let PV walk
// only the list. Here a gate thread whose token is needed takes the next free slot of the
// tile's list with atomicAdd on a shared counter and writes its token there
// (rows[i % kBufs][slot]) and its weights in the same column of p16 (p16[i % kBufs][h][slot]).
// The producers copy V row list[j] into row j of the staged tile, rows nnz .. round16(nnz) - 1
// are zeroed, and the PV step runs round16(nnz) / 16 mma steps instead of 8.
//  * With bulk rows the list's rows are dealt over the four producer warps (copy_v's
//    `compacted`, Producer::dealt_row): a list of 32 rows would otherwise sit on the first
//    warp, whose lanes issue their copies one after another between the gate and PV.
//  * The order of the list is the order in which the threads' atomics happened to land:
//    it changes from run to run. The output is the same sum in another order, so it changes
//    in its last bits (an mma adds 16 rows at a time in fp32, and a row moves to another
//    group of 16). Step 10 makes the order fixed.
//  * nnz is known once every gate thread has taken its slot: after barrier B. Thread 0 then
//    publishes it (nnz_of[i % kBufs]) and every consumer arrives on listed after barrier B
//    (after zeroing the weights of the padding rows, if it owns one). The producers read
//    nnz_of after waiting on listed; so do the consumers at the tile's PV step, since no
//    barrier of theirs need lie between the two (the last tiles' V come back to back).
//  * The counters alternate by tile: thread 0 resets tile i - 1's after barrier A of tile i
//    (every consumer read it before that barrier), and tile i + 1's gate is the next to
//    increment it.
// Run: lesson05_sparse_p [--check | --bench] --variant compact_atomic
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t, int CTAS_PER_SM, int SEQS,  // SEQS: sequences per CTA (CtaSeqs)
          int STAGES = default_stages(CTAS_PER_SM)>  // the ring: Layout
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
compact_atomic_gated_kernel(scalar_t* __restrict__ out,             // [B, H, D]
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
    __shared__ int counter[2];          // the slots taken in tile i's list (atomicAdd): counter[i % 2]
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
    if (tid < 2) counter[tid] = 0;
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
        if (tid == 0) counter[(i + 1) % 2] = 0;  // tile i - 1's count was read before barrier A
        // 2. the gate, and the list: a token some head needs takes the next slot of
        //    rows[i % kBufs], and its weights go to the same column of p16[i % kBufs]
        if (tid < kGateThreads) {
            float p[kHeads];
            gate_token<L::kScoreRegion>(p, scores, sm.carry + (w.starts_sequence(i) ? 2 : (i + 1) % 2) * 2 * kHeads, sm.carry + (i % 2) * 2 * kHeads, tid, n,
                       num_heads, gate);
            release_k_after_gate<L>(&empty[slot]);
            bool needed = false;
#pragma unroll
            for (int h = 0; h < kHeads; ++h) needed |= p[h] != 0.f;
            if (needed) {
                const int slot = atomicAdd(&counter[i % 2], 1);
                sm.rows[(i % kBufs) * kTile + slot] = static_cast<uint8_t>(tid);
#pragma unroll
                for (int h = 0; h < kHeads; ++h) pb[h * kPStride + slot] = pa::from_float<scalar_t>(p[h]);
            }
        }
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // B: every slot is taken
        const int nnz = counter[i % 2];
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
