// Lesson 06, exercise 2 (extension): a sliding-window causal prefill (the local attention of
// Mistral and of Gemma's local layers) on step 3's kernel (../step3_wgmma.cuh). The kernel has
// one more argument, `window` (W >= 1): the new token at position p = prefix + i attends only to
//     p - W < t <= p
// (W at least p + 1 is plain causal prefill; the grader passes 2^30 for "no window"). Write:
//   TODO(1) j_begin: the first K/V tile the CTA needs (1 line; it makes a short window fast)
//   TODO(2) the window's far edge: scores of positions t <= p - W become -INFINITY (4 lines)
// Then: lesson06_exercise --grade --exercise window (exercise/README.md). Needs sm_90a.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "hopper.cuh"
#include "mma.cuh"
#include "policies.cuh"
#include "step2_mma_sync.cuh"  // Batch

namespace ex_window {

using namespace lesson06;  // the lesson's policies, sm90 helpers and constants
using step2::Batch;

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kRows = 64 * kWarpgroups;  // query rows per CTA
constexpr int kTile = 128;               // keys per K/V tile
constexpr int kD = kHeadSize;
constexpr int kStages = 2;
constexpr int kNB = kTile / 8;                                         // 16 blocks of 8 keys
constexpr int kTileBytes = kTile * kD * 2;                             // 32 KiB of K or V
constexpr int kSmemBytes = kRows * kD * 2 + 2 * kStages * kTileBytes;  // Q + K, V stages: 160 KiB

// The unswizzled K-major core-matrix layout: byte offset of element (row, d) in a [rows][128] tile.
// 16-byte piece i of the tile (i = 8 * core matrix + row in it) sits at byte 16 * i, which is
// how the copies below are numbered.
__host__ __device__ constexpr int core_offset_bytes(int row, int d) {
    return ((row / 8) * 1024 + (d / 8) * 64 + (row % 8) * 8 + d % 8) * 2;
}
// Offsets between core matrices in that layout
constexpr uint32_t kCoreAlongD = 128;     // next 8 dims, same 8 rows
constexpr uint32_t kCoreAlongRows = 2048;  // next 8 rows, same 8 dims

template <class Policy>
__global__ void __launch_bounds__(kThreads, 1) wgmma_prefill_kernel(Batch a, PolicyParams pp, int window) {
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned char* q_s = smem;                                 // [kRows][128], core-matrix layout
    unsigned char* k_s = q_s + kRows * kD * 2;                 // [kStages][kTile][128]
    unsigned char* v_s = k_s + kStages * kTileBytes;           // [kStages][kTile][128]

    const int head = blockIdx.x;
    const QueryTile tile = a.tiles[blockIdx.y];
    const int seq = tile.seq, row0 = tile.row0;
    const int kv_head = head / (a.H / a.Hkv);
    const int prefix = a.prefix_lens[seq], n_new = a.new_lens[seq];
    const int total = prefix + n_new;
    const int kv_end = prefix + min(row0 + kRows, n_new);
    const int num_kv_tiles = (kv_end + kTile - 1) / kTile;
    const int* pages = a.block_table + static_cast<size_t>(seq) * a.max_blocks_per_seq;
    const size_t q_row0 = static_cast<size_t>(a.q_start[seq]) + row0;

    const int tid = threadIdx.x;
    const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;

    // The 2048 16-byte pieces of a 128-row tile: thread tid copies pieces tid + 256 k; piece i is
    // row (i / 128) * 8 + i % 8, dims ((i / 8) % 16) * 8 .. + 8, and goes to byte 16 i.
    auto piece_row = [](int i) { return (i / 128) * 8 + i % 8; };
    auto piece_d = [](int i) { return ((i / 8) % 16) * 8; };
    for (int k = 0; k < kRows * kD / 8 / kThreads; ++k) {
        const int i = tid + k * kThreads, r = piece_row(i);
        unsigned char* dst = q_s + 16 * i;
        if (row0 + r < n_new)
            pa::cp_async16(dst, a.q + ((q_row0 + r) * a.H + head) * kD + piece_d(i));
        else
            *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
    auto load_kv = [&](int j) {
        unsigned char* kd = k_s + (j % kStages) * kTileBytes;
        unsigned char* vd = v_s + (j % kStages) * kTileBytes;
#pragma unroll
        for (int k = 0; k < kTile * kD / 8 / kThreads; ++k) {
            const int i = tid + k * kThreads;
            const int pos = j * kTile + piece_row(i);
            if (pos < total) {
                const int block = __ldg(pages + pos / kPageSize);
                const size_t src = ((static_cast<size_t>(block) * a.Hkv + kv_head) * kPageSize + pos % kPageSize) * kD + piece_d(i);
                pa::cp_async16(kd + 16 * i, a.k_cache + src);
                pa::cp_async16(vd + 16 * i, a.v_cache + src);
            } else {  // past the sequence: zeros, never the cache's NaN
                *reinterpret_cast<uint4*>(kd + 16 * i) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(vd + 16 * i) = make_uint4(0, 0, 0, 0);
            }
        }
    };
    // TODO(1) (1 line): the first K/V tile any row of this CTA sees. Its first row (position
    // prefix + row0) has the earliest window; tiles wholly before it need not be loaded at all.
    const int j_begin = 0;
    load_kv(j_begin);
    pa::cp_async_commit();

    // This thread's rows (accumulator layout): 64 wg + 16 warp + lane / 4, and + 8.
    const int i_g = row0 + 64 * wg + 16 * warp + lane / 4;
    const int last[2] = {prefix + i_g, prefix + i_g + 8};
    const int first_row_last = prefix + row0 + 64 * wg;  // this warpgroup's first row: key tiles past it need the mask

    Policy policy = make_policy(pp, static_cast<Policy*>(nullptr));
    float o[64];  // O[64 x 128] of this warpgroup: 16 blocks of 8 dims
#pragma unroll
    for (int k = 0; k < 64; ++k) o[k] = 0.f;
    float s[4 * kNB];  // S[64 x 128]: 16 blocks of 8 keys

    for (int j = j_begin; j < num_kv_tiles; ++j) {
        if (j + 1 < num_kv_tiles) load_kv(j + 1);
        pa::cp_async_commit();
        pa::cp_async_wait<1>();         // this thread's pieces of tile j (and of Q) are in shared memory
        sm90::fence_proxy_async_smem();  // ... and visible to the async proxy that wgmma reads through
        __syncthreads();                // everyone's are

        const unsigned char* kt = k_s + (j % kStages) * kTileBytes;
        const unsigned char* vt = v_s + (j % kStages) * kTileBytes;
        const int kv0 = j * kTile;

        // 1. S = Q K^T: one fence, 8 wgmma (16 dims each), one commit, one wait.
        sm90::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
            // A: this warpgroup's 64 q rows (8 core matrices down, SBO apart; the other warpgroup's
            // start 8 further), dims 16 ks .. + 16 (2 core matrices along d, LBO apart);
            // B: the 128 keys of the tile, the same way.
            const uint64_t da = sm90::make_smem_desc(q_s + wg * 8 * kCoreAlongRows + ks * 2 * kCoreAlongD, kCoreAlongD,
                                                     kCoreAlongRows, sm90::Swizzle::none);
            const uint64_t db = sm90::make_smem_desc(kt + ks * 2 * kCoreAlongD, kCoreAlongD, kCoreAlongRows, sm90::Swizzle::none);
            sm90::wgmma_m64n128k16_ss(s, da, db, ks > 0);
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(s);

        // TODO(2) (4 lines): the window's far edge. Row r (of the two this thread holds) sees key
        // position t only when last[r] - window < t; give every other score -INFINITY, as the
        // policy does past last[r]. Register s[4 jj + e] is key kv0 + 8 jj + 2 (lane % 4) + (e & 1)
        // of row e >> 1.

        // 2. S -> P in registers; the softmax rescales the output so far.
        float alpha[2];
        policy.to_p(s, kv0, last, kv0 + kTile - 1 > first_row_last, lane, alpha);
        rescale_output<Policy>(o, alpha);
        uint32_t p[kTile / 16][4];  // A fragments: keys 16 kt .. + 16 are S blocks 2 kt and 2 kt + 1
#pragma unroll
        for (int kt16 = 0; kt16 < kTile / 16; ++kt16)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                p[kt16][e] = pa::pack2(s[8 * kt16 + 2 * e], s[8 * kt16 + 2 * e + 1], __nv_bfloat16{});

        // 3. O += P V: 8 wgmma of 16 keys. V is MN-major: along d (N) the core matrices are
        // kCoreAlongD apart (SBO), along keys (K) kCoreAlongRows (LBO).
        sm90::wgmma_fence();  // O and P were written by ordinary instructions
#pragma unroll
        for (int kt16 = 0; kt16 < kTile / 16; ++kt16) {
            const uint64_t dv = sm90::make_smem_desc(vt + kt16 * 2 * kCoreAlongRows, kCoreAlongRows, kCoreAlongD,
                                                     sm90::Swizzle::none);
            sm90::wgmma_m64n128k16_rs_transb(o, p[kt16], dv, 1);
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(o);
        __syncthreads();  // both warpgroups are done with stage j % 2 before tile j + 2 lands in it
    }
    pa::cp_async_wait<0>();

    float out_scale[2];
    policy.finish(out_scale);
    const int c = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = i_g + 8 * r;
        if (i >= n_new) continue;
        __nv_bfloat16* dst = a.out + ((static_cast<size_t>(a.q_start[seq]) + i) * a.H + head) * kD + 2 * c;
#pragma unroll
        for (int d = 0; d < kD / 8; ++d)
            *reinterpret_cast<__nv_bfloat162*>(dst + 8 * d) =
                __floats2bfloat162_rn(o[4 * d + 2 * r] * out_scale[r], o[4 * d + 2 * r + 1] * out_scale[r]);
    }
}

}  // namespace ex_window
