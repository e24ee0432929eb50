// Lesson 05, step 13 (`branchless_gate`): the gate with no branch around its loads or its
// division, so the 24 score loads of a gate thread are in flight together.
//
// What changed since step 10 (`diff step10_compact_ordered.cuh step13_branchless_gate.cuh`;
// steps 11 and 12 split a sequence over partitions for small grids, and keep step 10's
// gate), and why: a timeline of one CTA (globaltimer stamps in a trial build, H200,
// h8kv4-B64-ctx512, sigma 2.9) showed a tile's gate taking about 1 us, longer than its QK
// (0.35 us) and its list (0.3 us), on the consumers' chain between a K tile landing and its
// V rows being asked for. gate_token (gated_tile.cuh) guards each head's three score loads
// with `if (h < num_heads && t < n)` and divides by 3 with the IEEE division, whose slow
// path is a call: the compiler makes each head a branch region of its own, so the eight
// heads' loads follow one another, each waiting its shared-memory latency. Here
// (gate_token_branchless) every load is made, from an address chosen first: the token's own
// score, and for t - 1 and t - 2 the tile's score or, for the first two tokens, the carry;
// what a head past the group or a token past the end must not use is dropped by a select.
// And x / 3 is div3_rn: two FMAs round the product by 1/3 to the nearest float, which
// equals x / 3 for every finite x >= 0 (a GPU test checks all 2^31 of them; the sum of
// three r is never negative), with no slow path. The weights are the same bits as step 10's (the GPU
// tests compare the two outputs bit for bit, and div3_rn with x / 3 for every x); what the
// gate costs now is in NOTES.md ("Step 13").
// Run: lesson05_sparse_p [--check | --bench] --variant branchless_gate
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

// x / 3, rounded to the nearest float, for every x >= 0 (+inf included): q0 = x * (1/3)
// rounded, then one FMA step with the remainder x - 3 q0 (exact in an FMA) corrects q0 to
// the nearest float. Equal to x / 3.0f for every finite x >= 0, denormals included (the GPU
// test "div3_rn ... equals x / 3.0f" compares all of them). The gate's x, a sum of three
// r = max(s, 0), is never negative or NaN, so the IEEE division's check for its slow path
// has nothing to catch here.
static_assert(kFirK == 3, "div3_rn divides by the gate's 3 taps");
__device__ __forceinline__ float div3_rn(float x) {
    constexpr float kThird = 1.f / 3.f;
    const float q0 = x * kThird;
    const float rem = fmaf(-q0, 3.f, x);
    return isinf(x) ? x : fmaf(rem, kThird, q0);
}

// gate_token (gated_tile.cuh) with every load unconditional (its address selected) and a
// select in place of each branch: the same weights and carry, in the same bits.
template <int REGION>
__device__ __forceinline__ void gate_token_branchless(float (&p)[kHeads], const float* scores, const float* carry_in,
                                                      float* carry_out, int t, int n, int num_heads, GateArgs gate) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
        const bool live = h < num_heads && t < n;
        // the two tokens before t: scores in this tile, r of the tile before (the carry) for t < 2
        const float* at1 = t >= 1 ? scores + score_index<REGION>(h, t - 1) : carry_in + 2 * h + 1;
        const float* at2 = t >= 2 ? scores + score_index<REGION>(h, t - 2) : carry_in + 2 * h + t;
        const float s0 = scores[score_index<REGION>(h, t)], s1 = *at1, s2 = *at2;
        const float r0 = live ? fmaxf(s0, 0.f) : 0.f;
        const float r1 = t >= 1 ? fmaxf(s1, 0.f) : s1;
        const float r2 = t >= 2 ? fmaxf(s2, 0.f) : s2;
        const float a = div3_rn(r0 + r1 + r2);
        p[h] = live ? gate.gamma * fminf(fmaxf(r0 - gate.sigma * a, 0.f), 1.f) : 0.f;
        if (t >= kTile - 2) carry_out[2 * h + t - (kTile - 2)] = r0;
    }
}

template <class scalar_t, int CTAS_PER_SM, int SEQS,  // SEQS: sequences per CTA (CtaSeqs)
          int STAGES = default_stages(CTAS_PER_SM)>  // the ring: Layout
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
branchless_gate_kernel(scalar_t* __restrict__ out,             // [B, H, D]
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
            gate_token_branchless<L::kScoreRegion>(p, scores, sm.carry + (w.starts_sequence(i) ? 2 : (i + 1) % 2) * 2 * kHeads, sm.carry + (i % 2) * 2 * kHeads, tid, n,
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
