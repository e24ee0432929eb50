// Lesson 06, step 4: K, V and Q in shared memory with the 128-byte swizzle (sm_90a only).
//
// What changed since step 3 (wgmma), and why: step 3's core-matrix layout is one the copy engine
// (TMA, step 5) cannot write. The 128-byte swizzle is one it can, and wgmma reads it too: D = 128
// is split into two halves of 64 dims (128 bytes per row, the swizzle's width), each a [rows][64]
// tile in which 16-byte chunk c of row r is stored at chunk c ^ (r % 8), so the 8 rows of a
// core-matrix column fall in 8 different bank groups. The copies are still cp.async; only where
// each 16 bytes land changes, and the descriptors (swizzle mode 1, SBO = 1024 bytes).
// Run: lesson06_wgmma_prefill [--check | --bench] [--variant wgmma_swizzle_softmax]
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "hopper.cuh"
#include "mma.cuh"
#include "policies.cuh"
#include "step2_mma_sync.cuh"  // Batch

namespace lesson06::step4 {

using step2::Batch;

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kRows = 64 * kWarpgroups;  // query rows per CTA
constexpr int kTile = 128;               // keys per K/V tile
constexpr int kD = kHeadSize;
constexpr int kStages = 2;
constexpr int kNB = kTile / 8;                                         // 16 blocks of 8 keys
constexpr int kHalfBytes = kTile * 64 * 2;                             // one 64-dim half of a K or V tile: 16 KiB
constexpr int kTileBytes = 2 * kHalfBytes;                              // 32 KiB
constexpr int kQBytes = kRows * kD * 2;                                 // 32 KiB
constexpr int kSmemBytes = kQBytes + 2 * kStages * kTileBytes + 1024;  // 160 KiB + room to align to 1024

// The 128-byte-swizzled layout of a [128 rows][128] tile: two halves of 64 dims, each [rows][64]
// with one 128-byte row per row; 16-byte chunk c (dims 8c .. 8c + 7 of the half) of row r is
// stored at chunk c ^ (r % 8). The copies below number the tile's 2048 16-byte pieces so that 8
// consecutive threads fill one 128-byte row: piece i is half i / 1024, row (i / 8) % 128, chunk i % 8.
__host__ __device__ constexpr int swizzled_offset_bytes(int i) {
    return (i / 1024) * kHalfBytes + ((i / 8) % 128) * 128 + ((i % 8) ^ ((i / 8) % 8)) * 16;
}

template <class Policy>
__global__ void __launch_bounds__(kThreads, 1) wgmma_prefill_kernel(Batch a, PolicyParams pp) {
    extern __shared__ unsigned char smem_raw[];
    // Swizzled tiles must start on 1024-byte boundaries (the swizzle pattern repeats every 8 rows
    // of 128 bytes, and wgmma reads it off the address bits).
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    unsigned char* q_s = smem;                          // [2 halves][128 rows][64]
    unsigned char* k_s = q_s + kQBytes;                 // [kStages][2 halves][128 keys][64]
    unsigned char* v_s = k_s + kStages * kTileBytes;    // [kStages][2 halves][128 keys][64]

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
    // row (i / 8) % 128, dims (i / 1024) * 64 + (i % 8) * 8 .. + 8, and goes to swizzled_offset_bytes(i).
    auto piece_row = [](int i) { return (i / 8) % 128; };
    auto piece_d = [](int i) { return (i / 1024) * 64 + (i % 8) * 8; };
    for (int k = 0; k < kRows * kD / 8 / kThreads; ++k) {
        const int i = tid + k * kThreads, r = piece_row(i);
        unsigned char* dst = q_s + swizzled_offset_bytes(i);
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
                pa::cp_async16(kd + swizzled_offset_bytes(i), a.k_cache + src);
                pa::cp_async16(vd + swizzled_offset_bytes(i), a.v_cache + src);
            } else {  // past the sequence: zeros, never the cache's NaN
                *reinterpret_cast<uint4*>(kd + swizzled_offset_bytes(i)) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(vd + swizzled_offset_bytes(i)) = make_uint4(0, 0, 0, 0);
            }
        }
    };
    load_kv(0);
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

    // Descriptors. Q (A) and K (B of S = Q K^T) are K-major with the 128-byte swizzle: 8-row
    // groups 1024 bytes apart (SBO); a 16-dim step moves the start by 32 bytes inside the
    // swizzled row, and steps 4..7 use the second half. LBO is unused for these (16).
    auto desc_q = [&](int ks) {
        return sm90::make_smem_desc(q_s + (ks / 4) * (kQBytes / 2) + wg * 64 * 128 + (ks % 4) * 32, 16, 1024,
                                    sm90::Swizzle::b128);
    };
    auto desc_k = [&](int st, int ks) {
        return sm90::make_smem_desc(k_s + st * kTileBytes + (ks / 4) * kHalfBytes + (ks % 4) * 32, 16, 1024,
                                    sm90::Swizzle::b128);
    };
    // V (B of O += P V) is MN-major: a 16-key step is 16 rows = 2048 bytes on; along d (N) the
    // two 64-dim halves are kHalfBytes apart (LBO), along keys the 8-row groups 1024 (SBO).
    auto desc_v = [&](int st, int kt16) {
        return sm90::make_smem_desc(v_s + st * kTileBytes + kt16 * 2048, kHalfBytes, 1024, sm90::Swizzle::b128);
    };

    for (int j = 0; j < num_kv_tiles; ++j) {
        if (j + 1 < num_kv_tiles) load_kv(j + 1);
        pa::cp_async_commit();
        pa::cp_async_wait<1>();         // this thread's pieces of tile j (and of Q) are in shared memory
        sm90::fence_proxy_async_smem();  // ... and visible to the async proxy that wgmma reads through
        __syncthreads();                // everyone's are

        const int st = j % kStages;
        const int kv0 = j * kTile;

        // 1. S = Q K^T: one fence, 8 wgmma (16 dims each), one commit, one wait.
        sm90::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) sm90::wgmma_m64n128k16_ss(s, desc_q(ks), desc_k(st, ks), ks > 0);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(s);

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

        // 3. O += P V: 8 wgmma of 16 keys.
        sm90::wgmma_fence();  // O and P were written by ordinary instructions
#pragma unroll
        for (int kt16 = 0; kt16 < kTile / 16; ++kt16) sm90::wgmma_m64n128k16_rs_transb(o, p[kt16], desc_v(st, kt16), 1);
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

}  // namespace lesson06::step4
