// Lesson 06, step 7: setmaxnreg moves registers from the producer to the consumers (sm_90a only).
//
// What changed since step 6 (wgmma_producer), and why: with 384 threads and one CTA per SM the
// compiler fits every thread in 168 registers, the producer's warps as much as the consumers'.
// Now the producer warpgroup drops to 40 (setmaxnreg.dec) and the consumer warpgroups rise to
// 232 (setmaxnreg.inc): 128 x 40 + 256 x 232 = 64512 of the SM's 65536. This loop fits in 168;
// step 8's does not (at 168 ptxas spills it and serialises its wgmma, C7520).
// Run: lesson06_wgmma_prefill [--check | --bench] [--variant wgmma_setmaxnreg_softmax]
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

namespace lesson06::step7 {

using step2::Batch;

constexpr int kConsumers = 2;                    // consumer warpgroups, 64 query rows each
constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
constexpr int kRows = 64 * kConsumers;           // query rows per CTA
constexpr int kTile = 128;                       // keys per K/V tile: 8 pages
constexpr int kPagesPerTile = kTile / kPageSize;
constexpr int kNB = kTile / 8;                   // 16 blocks of 8 keys per score tile
constexpr int kD = kHeadSize;
constexpr int kHalfBytes = kTile * 64 * 2;       // one 64-dim half of a K or V tile: 16 KiB
constexpr int kTileBytes = 2 * kHalfBytes;       // 32 KiB
constexpr int kPageHalfBytes = kPageSize * 128;  // one TMA box: 16 keys x 128 bytes
constexpr int kQBytes = kRows * kD * 2;          // 32 KiB
constexpr int kStages = 3;                       // K and V ring slots
constexpr int kSmemBytes = kQBytes + 2 * kStages * kTileBytes + 1024;  // 224 KiB + room to align to 1024
// 128 x 40 + 256 x 232 = 64512 of the SM's 65536 registers
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

template <class Policy>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_ws_prefill_kernel(Batch a, PolicyParams pp, const __grid_constant__ Maps maps) {
    extern __shared__ unsigned char smem_raw[];
    // Swizzled tiles must start on 1024-byte boundaries (the swizzle pattern repeats every 8 rows
    // of 128 bytes, and the copy engine and wgmma both read it off the address bits).
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    unsigned char* q_s = smem;                          // [2 halves][128 rows][64]
    unsigned char* k_s = q_s + kQBytes;                 // [kStages][2 halves][128 keys][64]
    unsigned char* v_s = k_s + kStages * kTileBytes;    // [kStages][2 halves][128 keys][64]
    __shared__ uint64_t q_full, k_full[kStages], k_empty[kStages], v_full[kStages], v_empty[kStages];

    const int head = blockIdx.x;
    const QueryTile tile = a.tiles[blockIdx.y];
    const int seq = tile.seq, row0 = tile.row0;
    const int kv_head = head / (a.H / a.Hkv);
    const int prefix = a.prefix_lens[seq], n_new = a.new_lens[seq];
    const int total = prefix + n_new;
    const int kv_end = prefix + min(row0 + kRows, n_new);
    const int num_kv_tiles = (kv_end + kTile - 1) / kTile;
    const int pages_needed = (kv_end + kPageSize - 1) / kPageSize;  // pages any row of the tile sees
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;

    if (tid == 0) {
        sm90::mbarrier_init(&q_full, 1);
        for (int s = 0; s < kStages; ++s) {
            sm90::mbarrier_init(&k_full[s], 1);                // the producer's arrive.expect_tx
            sm90::mbarrier_init(&v_full[s], 32);               // every producer lane (one may have copied)
            sm90::mbarrier_init(&k_empty[s], 4 * kConsumers);  // one arrive per consumer warp
            sm90::mbarrier_init(&v_empty[s], 4 * kConsumers);
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

    if (wg == 0) {
        // ===================== producer =====================
        sm90::setmaxnreg_dec<kProducerRegs>();
        if (tid / 32 != 0) return;  // one warp issues everything; the other three leave
        if (lane == 0) {
            sm90::mbarrier_arrive_expect_tx(&q_full, kQBytes);
            const int q_row = a.q_start[seq] + row0;  // rows past the last sequence read as zeros
            sm90::tma_load_3d(q_s, &maps.q, &q_full, 0, head, q_row);
            sm90::tma_load_3d(q_s + kQBytes / 2, &maps.q, &q_full, 64, head, q_row);
        }
        const int* pages = a.block_table + static_cast<size_t>(seq) * a.max_blocks_per_seq;
        for (int j = 0; j < num_kv_tiles; ++j) {
            const int st = j % kStages;
            const uint32_t parity = (j / kStages) & 1;
            const int first_page = j * kPagesPerTile;
            const int n_pages = min(kPagesPerTile, pages_needed - first_page);
            // lane p copies page p of the tile (both halves): its block id, read before the wait
            const int block = lane < n_pages ? __ldg(pages + first_page + lane) : 0;

            // K: every page of the tile through the copy engine.
            sm90::mbarrier_wait(&k_empty[st], parity ^ 1);  // the consumers are done with this slot
            if (lane == 0) sm90::mbarrier_arrive_expect_tx(&k_full[st], n_pages * 2 * kPageHalfBytes);
            __syncwarp();
            unsigned char* kd = k_s + st * kTileBytes + lane * kPageHalfBytes;
            if (lane < n_pages) {
                sm90::tma_load_4d(kd, &maps.k, &k_full[st], 0, 0, kv_head, block);
                sm90::tma_load_4d(kd + kHalfBytes, &maps.k, &k_full[st], 64, 0, kv_head, block);
            }

            // V: the same, except a partial last page of the sequence, copied by the warp with its
            // tail zeroed (the cache holds NaN there, and 0 * NaN in P V would be NaN).
            sm90::mbarrier_wait(&v_empty[st], parity ^ 1);
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
        }
        return;
    }

    // ===================== consumers =====================
    sm90::setmaxnreg_inc<kConsumerRegs>();
    const int w = wg - 1;                  // consumer 0 or 1: rows 64 w .. 64 w + 63 of the tile
    const int warp = (tid / 32) % 4;
    const int i_g = row0 + 64 * w + 16 * warp + lane / 4;
    const int last[2] = {prefix + i_g, prefix + i_g + 8};
    const int first_row_last = prefix + row0 + 64 * w;

    Policy policy = make_policy(pp, static_cast<Policy*>(nullptr));
    float o[64];
#pragma unroll
    for (int k = 0; k < 64; ++k) o[k] = 0.f;
    float s[64];
    uint32_t p[kTile / 16][4];

    // Descriptors. Q (A) and K (B of S = Q K^T) are K-major with the 128-byte swizzle: 8-row
    // groups 1024 bytes apart (SBO); a 16-dim step moves the start by 32 bytes inside the
    // swizzled row, and steps 4..7 use the second half. LBO is unused for these (16).
    auto desc_q = [&](int ks) {
        return sm90::make_smem_desc(q_s + (ks / 4) * (kQBytes / 2) + w * 64 * 128 + (ks % 4) * 32, 16, 1024,
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
    auto release = [&](uint64_t* bar) {  // this warp's wgmma reads of the slot are complete
        __syncwarp();
        if (lane == 0) sm90::mbarrier_arrive(bar);
    };

    sm90::mbarrier_wait(&q_full, 0);

    for (int j = 0; j < num_kv_tiles; ++j) {
        const int st = j % kStages;
        sm90::mbarrier_wait(&k_full[st], (j / kStages) & 1);

        // 1. S = Q K^T: one fence, 8 wgmma, one commit, one wait; then the K slot is free.
        sm90::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) sm90::wgmma_m64n128k16_ss(s, desc_q(ks), desc_k(st, ks), ks > 0);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(s);
        release(&k_empty[st]);

        // 2. S -> P in registers; the softmax rescales the output so far.
        const int kv0 = j * kTile;
        float alpha[2];
        policy.to_p(s, kv0, last, kv0 + kTile - 1 > first_row_last, lane, alpha);
        rescale_output<Policy>(o, alpha);
#pragma unroll
        for (int kt16 = 0; kt16 < kTile / 16; ++kt16)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                p[kt16][e] = pa::pack2(s[8 * kt16 + 2 * e], s[8 * kt16 + 2 * e + 1], __nv_bfloat16{});

        // 3. O += P V: 8 wgmma of 16 keys; then the V slot is free.
        sm90::mbarrier_wait(&v_full[st], (j / kStages) & 1);
        sm90::wgmma_fence();
#pragma unroll
        for (int kt16 = 0; kt16 < kPagesPerTile; ++kt16)
            sm90::wgmma_m64n128k16_rs_transb(o, p[kt16], desc_v(st, kt16), 1);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(o);
        release(&v_empty[st]);
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

}  // namespace lesson06::step7
