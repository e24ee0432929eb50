// Lesson 05, step 1 (`gate`): lesson 02's warp-specialised grouped CTA with the gate in place of the softmax.
//
// What changed since lesson 02 (02_thread_groups/step10_warp_specialized.cuh), and why: the
// attention is the H200 post's gate (reference/gated_reference.h), so nothing is normalised:
// no running max, no running sum, no rescaling; the gate's moving average reads the last two
// tokens' r of the tile before, which the gate threads keep in a two-float carry per head
// (gated_tile.cuh). The rest is lesson 02's: K and V tiles stream alternately (K0 V0 K1 V1
// ...) through a ring of 2 slots (gated_layout.cuh's third layout, 85 KiB, which every GPU
// of the lesson runs), copied with cp.async by 4 producer warps that read each row's page
// id from the block table (PlainProducer) and announce a tile once their copies have landed.
// Every V row is copied and multiplied, zero weight or not.
//
// The consumers walk the stream in the producers' order, one ring slot per item:
//   K_i:  QK (scores)                | barrier A: every score of the tile is written
//         gate (p16, carry)          | barrier B: the scores buffer is free again, p16 is written
//   V_i:  PV with p16
// The next K tile's QK writes the one scores buffer, hence barrier B; the next gate writes
// p16 only after barrier A of the next tile, which every consumer reaches after its PV.
// Run: lesson05_sparse_p [--check | --bench] --variant gate
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t>
__global__ void __launch_bounds__(kThreads, 1)
gate_kernel(scalar_t* __restrict__ out,             // [B, H, D]
            const scalar_t* __restrict__ q,         // [B, H, D]
            const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
            const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
            const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
            const int* __restrict__ context_lens,   // [B]
            int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale, GateArgs gate) {
    using L = Layout<1, kSmallStages>;  // one CTA per SM, a 2-slot ring, a scores buffer
    constexpr int kStages = L::kStages;
    const int kv_head = blockIdx.x;
    const int seq = blockIdx.y;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= kHeads
    const int ctx = context_lens[seq];
    const int tiles = (ctx + kTile - 1) / kTile;

    extern __shared__ __align__(16) unsigned char smem[];
    const Smem<scalar_t> sm = carve_smem<scalar_t, 1, kSmallStages>(smem);
    __shared__ uint64_t full[kStages], empty[kStages];
    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if (threadIdx.x >= kConsumerThreads) {
        // Producers: stream position s (K_{s/2}, then V_{s/2}) uses slot s % kStages once the
        // consumers have released its previous tile (use s / kStages - 1 of `empty`). Lesson
        // 02 announced a tile after issuing kStages - 2 later ones; with 2 slots that is none:
        // a producer thread waits for its own copies, then arrives.
        PlainProducer<scalar_t> producer(threadIdx.x - kConsumerThreads,
                                         block_table + static_cast<size_t>(seq) * max_blocks_per_seq, Hkv, kv_head,
                                         block_size, ctx);
        for (int s = 0; s < 2 * tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            producer.copy(sm.tiles + slot * kTileElems, (s & 1) ? v_cache : k_cache, s / 2);
            pa::cp_async_wait<0>();
            pa::mbarrier_arrive(&full[slot]);
        }
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
        const int i = s / 2;
        pa::mbarrier_wait(&full[slot], (s / kStages) & 1);
        scalar_t* buf = sm.tiles + slot * kTileElems;
        if (s & 1) {  // PV of tile i: every row of its V tile
            pv_steps(acc, buf, sm.p16, kTile / 16, warp, lane);
            pa::mbarrier_arrive(&empty[slot]);
            continue;
        }
        // 1. scores of tile i, into the scores buffer; the K slot is free once they are written
        const int n = min(kTile, ctx - i * kTile);  // tokens of this tile
        qk_tile<0>(sm.scores, buf, qf, n, scale, warp, lane);
        pa::mbarrier_arrive(&empty[slot]);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // A
        // 2. the gate: p16[h][t] for every token of the tile (0 past the end); the carry of
        //    tile i is read from buffer (i + 1) % 2 (buffer 2, zeros, for the first) and
        //    written to buffer i % 2
        if (tid < kGateThreads) {
            float p[kHeads];
            gate_token<0>(p, sm.scores, sm.carry + (i == 0 ? 2 : (i + 1) % 2) * 2 * kHeads,
                          sm.carry + (i % 2) * 2 * kHeads, tid, n, num_heads, gate);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) sm.p16[h * kPStride + tid] = pa::from_float<scalar_t>(p[h]);
        }
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // B
    }
    store_output(out, acc, seq, H, first_head, num_heads, warp, lane);
}

}  // namespace lesson05
