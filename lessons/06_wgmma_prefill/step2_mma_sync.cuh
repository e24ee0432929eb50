// Lesson 06, step 2: causal prefill on tensor cores with mma.sync (sm_80 and newer).
//
// What changed since step 1 (prefill as decode), and why: step 1 runs one decode per new
// token, so a prompt of T tokens reads its K and V T times, and each read feeds two
// multiply-adds per element on CUDA cores. Here one CTA takes 64 new tokens (a query tile)
// of one head and walks the keys once for all of them: the scores of 64 rows x 64 keys are a
// matrix product (Q_tile K_tile^T), and so is the output update (P V_tile). Both run on
// tensor cores as mma.sync.m16n8k16, FlashAttention-2's design:
//  * 4 warps, each owning 16 query rows for the whole kernel: q fragments, the score tile
//    and the output (16 rows x 128 dims, fp32) stay in registers; only K and V go through
//    shared memory (cp.async, two stages: tile j + 1 streams in while tile j is computed).
//  * The policy (policies.cuh) turns the score fragment into P in registers, and the same
//    registers, rounded to bf16, are the A operand of the P V product: the accumulator layout
//    of m16n8k16 is its A layout, block by block.
//  * Causality: the key tiles run from position 0 to the last position the tile's last row
//    may see (prefix + row0 + 63); only tiles that reach past the first row's last position
//    need the mask.
//  * Rows of K and V past the sequence's end are zeroed in shared memory, never loaded: the
//    cache holds NaN there, and 0 * NaN is NaN.
// Run: lesson06_wgmma_prefill [--check | --bench] [--variant mma_sync_softmax]
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "mma.cuh"
#include "policies.cuh"
#include "prefill_problem.h"

namespace lesson06::step2 {

constexpr int kThreads = 128;         // 4 warps x 16 query rows
constexpr int kRows = 64;             // query rows (new tokens) per CTA
constexpr int kTile = 64;             // keys per K/V tile (4 pages)
constexpr int kD = kHeadSize;         // 128
constexpr int kRow = kD + 8;          // shared-memory row: 16 bytes of padding, ldmatrix without bank conflicts
constexpr int kStages = 2;
constexpr int kNB = kTile / 8;        // 8-key blocks of a score tile
constexpr int kSmemBytes = (kRows + 2 * kStages * kTile) * kRow * 2;  // Q, then K and V per stage: 85 KiB

// The batch as the kernels see it (built on the host from PrefillArgs).
struct Batch {
    __nv_bfloat16* out;               // [total_new, H, D]
    const __nv_bfloat16* q;           // [total_new, H, D]
    const __nv_bfloat16* k_cache;     // [num_blocks, Hkv, 16, D]
    const __nv_bfloat16* v_cache;     // [num_blocks, Hkv, 16, D]
    const int* block_table;           // [B, max_blocks_per_seq]
    const int* prefix_lens;           // [B]
    const int* new_lens;              // [B]
    const int* q_start;               // [B + 1]
    const QueryTile* tiles;           // [num_tiles]: (sequence, first new token), longest first
    int H, Hkv, max_blocks_per_seq;
};

template <class Policy>
__global__ void __launch_bounds__(kThreads, 2) mma_sync_prefill_kernel(Batch a, PolicyParams pp) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kRows][kRow]
    __nv_bfloat16* k_s = q_s + kRows * kRow;                           // [kStages][kTile][kRow]
    __nv_bfloat16* v_s = k_s + kStages * kTile * kRow;                 // [kStages][kTile][kRow]

    const int head = blockIdx.x;  // heads fastest: the group's heads share K/V tiles in L2
    const QueryTile tile = a.tiles[blockIdx.y];
    const int seq = tile.seq, row0 = tile.row0;
    const int kv_head = head / (a.H / a.Hkv);
    const int prefix = a.prefix_lens[seq], n_new = a.new_lens[seq];
    const int total = prefix + n_new;                          // positions in the cache
    const int kv_end = prefix + min(row0 + kRows, n_new);      // the tile's last row sees positions < kv_end
    const int num_kv_tiles = (kv_end + kTile - 1) / kTile;
    const int* pages = a.block_table + static_cast<size_t>(seq) * a.max_blocks_per_seq;
    const size_t q_row0 = static_cast<size_t>(a.q_start[seq]) + row0;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, c = lane % 4;

    // Q tile: q_s[r][d] = q[q_row0 + r, head, d]; rows past the sequence are zero (never stored).
    for (int i = tid; i < kRows * (kD / 8); i += kThreads) {
        const int r = i / (kD / 8), piece = i % (kD / 8);
        __nv_bfloat16* dst = q_s + r * kRow + piece * 8;
        if (row0 + r < n_new)
            pa::cp_async16(dst, a.q + ((q_row0 + r) * a.H + head) * kD + piece * 8);
        else
            *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
    // K/V tile j into stage j % 2: 64 rows x 16 pieces of 16 bytes, 8 per thread. Row r of the
    // tile is position kv0 + r: page pages[(kv0 + r) / 16], slot (kv0 + r) % 16.
    auto load_kv = [&](int j) {
        const int kv0 = j * kTile;
        __nv_bfloat16* kd = k_s + (j % kStages) * kTile * kRow;
        __nv_bfloat16* vd = v_s + (j % kStages) * kTile * kRow;
#pragma unroll
        for (int k = 0; k < kTile * (kD / 8) / kThreads; ++k) {
            const int i = tid + k * kThreads;
            const int r = i / (kD / 8), piece = i % (kD / 8);
            const int pos = kv0 + r;
            const int off = r * kRow + piece * 8;
            if (pos < total) {
                const int block = __ldg(pages + pos / kPageSize);
                // cache[block, kv_head, pos % 16, piece * 8 .. + 8]
                const size_t src = ((static_cast<size_t>(block) * a.Hkv + kv_head) * kPageSize + pos % kPageSize) * kD + piece * 8;
                pa::cp_async16(kd + off, a.k_cache + src);
                pa::cp_async16(vd + off, a.v_cache + src);
            } else {
                *reinterpret_cast<uint4*>(kd + off) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(vd + off) = make_uint4(0, 0, 0, 0);
            }
        }
    };
    load_kv(0);
    pa::cp_async_commit();  // group 0: Q and K/V tile 0

    // This warp's rows: i = row0 + 16 warp + g (and + 8); they may see positions <= last.
    const int i_g = row0 + warp * 16 + g;
    const int last[2] = {prefix + i_g, prefix + i_g + 8};
    const int first_row_last = prefix + row0;  // the tile's first row: tiles past it need the mask

    Policy policy = make_policy(pp, static_cast<Policy*>(nullptr));
    float o[kD / 8][4];  // output: 16 rows x 128 dims, block j = dims 8j .. 8j + 7
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    uint32_t qf[kD / 16][4];  // A fragments of this warp's 16 q rows, one per 16-dim step

    for (int j = 0; j < num_kv_tiles; ++j) {
        if (j + 1 < num_kv_tiles) load_kv(j + 1);
        pa::cp_async_commit();  // (an empty group past the last tile keeps the count uniform)
        pa::cp_async_wait<1>();  // this thread's copies of tile j (and Q) have landed
        __syncthreads();         // everyone's have
        if (j == 0) {
#pragma unroll
            for (int ks = 0; ks < kD / 16; ++ks)  // rows 16 warp + (lane % 16), dims 16 ks + (lane / 16) * 8
                pa::ldmatrix_x4(qf[ks], q_s + (warp * 16 + lane % 16) * kRow + ks * 16 + lane / 16 * 8);
        }
        const __nv_bfloat16* kt = k_s + (j % kStages) * kTile * kRow;
        const __nv_bfloat16* vt = v_s + (j % kStages) * kTile * kRow;
        const int kv0 = j * kTile;

        // 1. S = Q K^T: 16 rows x 64 keys per warp, 8 blocks of 8 keys, 8 steps of 16 dims.
        float s[4 * kNB];
#pragma unroll
        for (int k = 0; k < 4 * kNB; ++k) s[k] = 0.f;
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
            for (int ks2 = 0; ks2 < kD / 32; ++ks2) {
                // keys 8 nb + (lane % 8), dims 32 ks2 + (lane / 8) * 8: B fragments of two 16-dim steps
                uint32_t b[4];
                pa::ldmatrix_x4(b, kt + (nb * 8 + lane % 8) * kRow + ks2 * 32 + lane / 8 * 8);
                const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                float acc[4] = {s[4 * nb], s[4 * nb + 1], s[4 * nb + 2], s[4 * nb + 3]};
                pa::mma_16816<__nv_bfloat16>(acc, qf[2 * ks2], b0);
                pa::mma_16816<__nv_bfloat16>(acc, qf[2 * ks2 + 1], b1);
#pragma unroll
                for (int e = 0; e < 4; ++e) s[4 * nb + e] = acc[e];
            }

        // 2. S -> P (and the rescale of the output for softmax)
        float alpha[2];
        policy.to_p(s, kv0, last, kv0 + kTile - 1 > first_row_last, lane, alpha);
        if (Policy::kRescales && __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {  // see rescale_output
#pragma unroll
            for (int d = 0; d < kD / 8; ++d) {
                o[d][0] *= alpha[0];
                o[d][1] *= alpha[0];
                o[d][2] *= alpha[1];
                o[d][3] *= alpha[1];
            }
        }

        // 3. O += P V: P from the score registers (16 rows x 16 keys per step), V transposed by ldmatrix.
#pragma unroll
        for (int kt16 = 0; kt16 < kTile / 16; ++kt16) {
            const uint32_t p_frag[4] = {
                pa::pack2(s[8 * kt16 + 0], s[8 * kt16 + 1], __nv_bfloat16{}),
                pa::pack2(s[8 * kt16 + 2], s[8 * kt16 + 3], __nv_bfloat16{}),
                pa::pack2(s[8 * kt16 + 4], s[8 * kt16 + 5], __nv_bfloat16{}),
                pa::pack2(s[8 * kt16 + 6], s[8 * kt16 + 7], __nv_bfloat16{}),
            };
#pragma unroll
            for (int d2 = 0; d2 < kD / 16; ++d2) {
                // keys 16 kt16 + (lane % 8) + ((lane / 8) % 2) * 8, dims 16 d2 + (lane / 16) * 8
                uint32_t b[4];
                pa::ldmatrix_x4_trans(b, vt + (kt16 * 16 + lane % 8 + (lane / 8 % 2) * 8) * kRow + d2 * 16 + lane / 16 * 8);
                const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                pa::mma_16816<__nv_bfloat16>(o[2 * d2], p_frag, b0);
                pa::mma_16816<__nv_bfloat16>(o[2 * d2 + 1], p_frag, b1);
            }
        }
        __syncthreads();  // every warp is done with stage j % 2 before tile j + 2 overwrites it
    }
    pa::cp_async_wait<0>();

    // 4. out = O * out_scale (1 / l for softmax), rows of this sequence only.
    float out_scale[2];
    policy.finish(out_scale);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = i_g + 8 * r;
        if (i >= n_new) continue;
        __nv_bfloat16* dst = a.out + ((static_cast<size_t>(a.q_start[seq]) + i) * a.H + head) * kD + 2 * c;
#pragma unroll
        for (int d = 0; d < kD / 8; ++d)
            *reinterpret_cast<__nv_bfloat162*>(dst + 8 * d) =
                __floats2bfloat162_rn(o[d][2 * r] * out_scale[r], o[d][2 * r + 1] * out_scale[r]);
    }
}

}  // namespace lesson06::step2
