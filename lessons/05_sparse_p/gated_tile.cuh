// Lesson 05's building blocks: what every step of its ladder does the same way. The steps
// (step1_gate.cuh .. step13_branchless_gate.cuh) differ in how the copies are staged (steps
// 1-7) and then only in which V rows are copied and how the PV step finds them; everything
// here is lesson 02's warp-specialised CTA (step 10), reworked for the gate.
// This file holds the math; gated_layout.cuh the CTA's sizes, shared memory and stream
// order; gated_copies.cuh the producers, which fill the ring.
//
// The CTA is lesson 02's grouped one: one CTA per (sequence, KV head) serves the `group`
// query heads that share it, so each K/V element is read once. 4 producer warps copy K and
// V tiles of 128 tokens into a ring with cp.async; 8 consumer warps compute
//   scores[h][t] = scale * K_tile[t] . q[h]       mma.sync.m16n8k16, one 16-token block per warp
//                                                 (at two CTAs per SM written over the K tile's rows)
//   p[h][t]      = the gate of scores[h][.]       one consumer thread per token
//   out^T[d][h] += V_tile^T[d][t] p[h][t]         mma.sync.m16n8k16, 16 dims per warp
// Three things change from lesson 02 in the math (gated_copies.cuh tells what changed in the copies):
//  * The gate (reference/gated_reference.h) replaces the online softmax: nothing is
//    normalised, so there is no running max, no running sum and no rescaling of the
//    accumulators. p_t reads r_{t-1} and r_{t-2}, which for the first two tokens of a tile
//    belong to the tile before: the gate keeps them in a two-float `carry` per head.
//  * The stream runs kAhead K tiles ahead of the V tiles: K0 .. K_A, V0, K_{A+1}, V1, K_{A+2},
//    ... (A = kAhead: 3 at one CTA per SM, 2 at two, 1 in the 2-slot ring). The consumers
//    compute the gate of tile i (they have its K) before its V tile is issued, which is what
//    lets the later steps copy only the V rows some head needs, and the K tiles issued in
//    between keep the memory busy while the gates run. With one CTA per SM nothing else
//    hides the wait for a gate, and the K tiles run 3 ahead in a 6-slot ring; with two, 2
//    ahead in a 3-slot ring: at a CTA's start the ring then holds three K tiles instead of
//    two K tiles and an idle slot, whose V tile waits for the first gate (the README says how
//    this was chosen). The 2-slot ring of a 99 KiB GPU holds a K tile being gated and one
//    tile in flight. Steps 2-12 use the same order, so that from step 7 (dense) on the steps
//    differ in the bytes they read and nothing else.
//  * At two CTAs per SM a tile's scores have no buffer of their own: a consumer warp reads
//    only its 16 rows of the K tile, so once its QK is done it writes its scores over them
//    (score_index), and the slot is released when the gate has read them. That is what lets
//    that layout keep three tiles' weights (K 2 ahead) in its shared memory. At one CTA per
//    SM there is room for a scores buffer, and the K slot is released right after QK: the
//    6-slot ring is full there, and its producers wait for the oldest slot.
// D is 128 and a CTA serves up to 8 query heads (one 8-wide mma column block): the lesson's
// shapes are H8/Hkv4 and the tests cover groups 1 to 8; other shapes are refused by name.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "gated_copies.cuh"
#include "gated_layout.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"

namespace lesson05 {

// The gate's two numbers, passed by value to every kernel.
struct GateArgs {
    float gamma = 1.f;  // scales every weight
    float sigma = 0.f;  // 0 <= sigma < 3: the larger, the more weights are exactly 0
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

// A consumer thread is done with a slot: it arrives on the slot's `empty` barrier, and when
// bulk copies refill the ring, its reads and writes of the tile are first ordered before the
// copy engine's next write there (pa::release_slot: the copy engine is another proxy). A V
// slot is done after PV. A K slot: with the scores in the slot, a gate thread is done once its
// gate has read them (release_k_after_gate), the others once they have written theirs
// (release_k_after_qk); without, every consumer is done after its QK.
template <class L>
__device__ __forceinline__ void release_slot(uint64_t* empty) {
    pa::release_slot<L::kBulkCopies && kArchHasBulkCopies>(empty);
}
template <class L>
__device__ __forceinline__ void release_k_after_qk(uint64_t* empty, int tid) {
    if (!L::kScoresInSlot || tid >= kGateThreads) release_slot<L>(empty);
}
template <class L>
__device__ __forceinline__ void release_k_after_gate(uint64_t* empty) {
    if constexpr (L::kScoresInSlot) release_slot<L>(empty);
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
