// Lesson 06, step 5: K and V pages, and Q, arrive through the copy engine (TMA), sm_90a only.
//
// What changed since step 4 (wgmma_swizzle), and why: 256 threads computed addresses and issued
// cp.async for every 16 bytes. Now one cp.async.bulk.tensor copies a box of 16 keys x 64 dims
// (half of one page, 2 KiB) straight into the 128-byte swizzle step 4 laid out, and signals an
// mbarrier when its bytes are in; the tensor map (tma_maps.cu) describes the page pool as a 4-D
// tensor [num_blocks][Hkv][16][128], so the block table is just a coordinate. Warp 0 issues them.
// The last page of a sequence may be partial with NaN in its tail: warp 0 copies that page of V
// itself, zeroing the tail (ordinary stores, then fence.proxy.async); K's tail needs nothing,
// its scores are selected away.
// Run: lesson06_wgmma_prefill [--check | --bench] [--variant wgmma_tma_softmax]
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "hopper.cuh"
#include "mma.cuh"
#include "policies.cuh"
#include "step2_mma_sync.cuh"  // Batch
#include "tma_maps.cuh"       // Maps

namespace lesson06::step5 {

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
constexpr int kPagesPerTile = kTile / kPageSize;                        // 8
constexpr int kPageHalfBytes = kPageSize * 128;                         // one TMA box: 16 keys x 128 bytes

template <class Policy>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_prefill_kernel(Batch a, PolicyParams pp, const __grid_constant__ Maps maps) {
    extern __shared__ unsigned char smem_raw[];
    // Swizzled tiles must start on 1024-byte boundaries (the swizzle pattern repeats every 8 rows
    // of 128 bytes, and the copy engine and wgmma both read it off the address bits).
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    unsigned char* q_s = smem;                          // [2 halves][128 rows][64]
    unsigned char* k_s = q_s + kQBytes;                 // [kStages][2 halves][128 keys][64]
    unsigned char* v_s = k_s + kStages * kTileBytes;    // [kStages][2 halves][128 keys][64]
    __shared__ uint64_t q_full, k_full[kStages], v_full[kStages];

    const int head = blockIdx.x;
    const QueryTile tile = a.tiles[blockIdx.y];
    const int seq = tile.seq, row0 = tile.row0;
    const int kv_head = head / (a.H / a.Hkv);
    const int prefix = a.prefix_lens[seq], n_new = a.new_lens[seq];
    const int total = prefix + n_new;
    const int kv_end = prefix + min(row0 + kRows, n_new);
    const int num_kv_tiles = (kv_end + kTile - 1) / kTile;
    const int pages_needed = (kv_end + kPageSize - 1) / kPageSize;  // pages any row of the tile sees
    const int* pages = a.block_table + static_cast<size_t>(seq) * a.max_blocks_per_seq;

    const int tid = threadIdx.x;
    const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;

    if (tid == 0) {
        sm90::mbarrier_init(&q_full, 1);
        for (int s = 0; s < kStages; ++s) {
            sm90::mbarrier_init(&k_full[s], 1);   // lane 0's arrive.expect_tx
            sm90::mbarrier_init(&v_full[s], 32);  // every lane of warp 0 (one may have copied)
        }
        sm90::fence_barrier_init();
    }
    // The P V product always runs over the whole 128-key tile (a wgmma under a run-time condition
    // makes the compiler serialise all of them), so in the last tile it multiplies the pages that
    // were not loaded (past the last row's keys) by P = 0. They must hold finite numbers: pages a
    // slot kept from an earlier tile do (real V), a slot used for the first time may hold NaN, so
    // when the last tile is the first user of its slot those pages are zeroed first.
    const int last_tile = num_kv_tiles - 1;
    const int last_pages = pages_needed - last_tile * kPagesPerTile;
    if (last_tile < kStages && last_pages < kPagesPerTile) {
        unsigned char* vz = v_s + last_tile * kTileBytes + last_pages * kPageHalfBytes;
        const int per_half = (kPagesPerTile - last_pages) * kPageHalfBytes / 16;  // 16-byte words
        for (int i = tid; i < 2 * per_half; i += kThreads)
            reinterpret_cast<uint4*>(vz + (i / per_half) * kHalfBytes)[i % per_half] = make_uint4(0, 0, 0, 0);
        sm90::fence_proxy_async_smem();  // ordinary stores, read by wgmma (the async proxy)
    }
    __syncthreads();

    // Warp 0 issues the copies, Q's once and tile j's into slot j % kStages (free: every warp has
    // passed the __syncthreads that ends tile j - kStages).
    auto load_kv = [&](int j) {
        const int st = j % kStages;
        const int first_page = j * kPagesPerTile;
        const int n_pages = min(kPagesPerTile, pages_needed - first_page);
        // lane p copies page p of the tile (both halves)
        const int block = lane < n_pages ? __ldg(pages + first_page + lane) : 0;

        // K: every page of the tile through the copy engine.
        if (lane == 0) sm90::mbarrier_arrive_expect_tx(&k_full[st], n_pages * 2 * kPageHalfBytes);
        __syncwarp();
        unsigned char* kd = k_s + st * kTileBytes + lane * kPageHalfBytes;
        if (lane < n_pages) {
            sm90::tma_load_4d(kd, &maps.k, &k_full[st], 0, 0, kv_head, block);
            sm90::tma_load_4d(kd + kHalfBytes, &maps.k, &k_full[st], 64, 0, kv_head, block);
        }

        // V: the same, except a partial last page of the sequence, copied by the warp with its
        // tail zeroed (the cache holds NaN there, and 0 * NaN in P V would be NaN).
        const int last_valid = total - (first_page + n_pages - 1) * kPageSize;  // tokens in the tile's last page
        const bool partial = last_valid < kPageSize;
        const int tma_pages = partial ? n_pages - 1 : n_pages;
        unsigned char* vd = v_s + st * kTileBytes;
        if (partial) {
            const int pb = __shfl_sync(0xffffffffu, block, n_pages - 1);
            const __nv_bfloat16* src = a.v_cache + (static_cast<size_t>(pb) * a.Hkv + kv_head) * kPageSize * kD;
#pragma unroll 1
            for (int k = 0; k < 2 * kPageSize * 8 / 32; ++k) {  // 256 16-byte chunks, 8 per lane
                const int i = lane + 32 * k;
                const int half = i / 128, row = (i / 8) % kPageSize, chunk = i % 8;
                uint4 w = make_uint4(0, 0, 0, 0);
                if (row < last_valid) w = *reinterpret_cast<const uint4*>(src + row * kD + half * 64 + chunk * 8);
                // the 128-byte swizzle, by hand: chunk c of row r goes to chunk c ^ (r % 8)
                *reinterpret_cast<uint4*>(vd + half * kHalfBytes + (n_pages - 1) * kPageHalfBytes + row * 128 +
                                          ((chunk ^ (row % 8)) * 16)) = w;
            }
            sm90::fence_proxy_async_smem();  // these ordinary stores are read by wgmma (async proxy)
        }
        if (lane == 0)
            sm90::mbarrier_arrive_expect_tx(&v_full[st], tma_pages * 2 * kPageHalfBytes);
        else
            sm90::mbarrier_arrive(&v_full[st]);
        __syncwarp();
        if (lane < tma_pages) {
            sm90::tma_load_4d(vd + lane * kPageHalfBytes, &maps.v, &v_full[st], 0, 0, kv_head, block);
            sm90::tma_load_4d(vd + kHalfBytes + lane * kPageHalfBytes, &maps.v, &v_full[st], 64, 0, kv_head, block);
        }
    };
    if (tid < 32) {
        if (lane == 0) {
            sm90::mbarrier_arrive_expect_tx(&q_full, kQBytes);
            const int q_row = a.q_start[seq] + row0;  // rows past the last sequence read as zeros
            sm90::tma_load_3d(q_s, &maps.q, &q_full, 0, head, q_row);
            sm90::tma_load_3d(q_s + kQBytes / 2, &maps.q, &q_full, 64, head, q_row);
        }
        load_kv(0);
    }

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

    sm90::mbarrier_wait(&q_full, 0);

    for (int j = 0; j < num_kv_tiles; ++j) {
        if (tid < 32 && j + 1 < num_kv_tiles) load_kv(j + 1);
        const int st = j % kStages;
        const int kv0 = j * kTile;
        sm90::mbarrier_wait(&k_full[st], (j / kStages) & 1);  // the copy engine's bytes are in

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
        sm90::mbarrier_wait(&v_full[st], (j / kStages) & 1);
        sm90::wgmma_fence();  // O and P were written by ordinary instructions
#pragma unroll
        for (int kt16 = 0; kt16 < kTile / 16; ++kt16) sm90::wgmma_m64n128k16_rs_transb(o, p[kt16], desc_v(st, kt16), 1);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(o);
        __syncthreads();  // both warpgroups are done with stage j % 2 before tile j + 2 lands in it
    }

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

}  // namespace lesson06::step5
