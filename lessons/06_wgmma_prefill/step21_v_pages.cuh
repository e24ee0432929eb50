// Lesson 06, step 21: each page of V in one copy (sm_90a only).
//
// What changed since step 20 (wgmma_tree_max), and why: the producer copied every 16-token page
// of a K or V tile as two boxes, one per 64-dim half, 2 KiB each (the 128-byte swizzle takes rows
// of at most 128 bytes), 32 copies a tile pair; a build with no MMAs and no softmax still took
// most of the last step's time, and one whose boxes each took two pages ran faster (NOTES.md,
// "Step 21"): the copy engine pays per copy. A V tile is read by P V sixteen keys at a time, one
// page a step, so its pages need not lie in two 16 KiB planes: here each page lands whole, its two
// halves 2 KiB apart ([page][half][16 keys][64], one box of a five-dimensional view of the pool,
// PageMaps::v_pages), and the P V descriptor steps 4 KiB a page with the halves 2 KiB apart (LBO).
// 24 copies a tile pair. K keeps its planes: S = Q K^T reads 128 keys at a time, which needs the
// keys of a plane at one stride. The policies are step 20's.
// Run: lesson06_wgmma_prefill [--check | --bench] [--variant wgmma_v_pages_softmax]
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
#include "tma_maps.cuh"       // PageMaps

namespace lesson06::step21 {

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
constexpr int kPageHalfBytes = kPageSize * 128;  // 64 dims of a page: 16 keys x 128 bytes
constexpr int kPageBytes = 2 * kPageHalfBytes;     // a page of V in its slot: both halves
constexpr int kQBytes = kRows * kD * 2;          // 32 KiB: a K slot's size and layout
constexpr int kStages = 3;                       // K and V ring slots (the K ring carries each item's Q too)
constexpr int kOBytes = kRows * kD * 2;          // the output buffer: [2 consumers][2 halves][64 rows][64], 32 KiB
constexpr int kSmemBytes = kOBytes + 2 * kStages * kTileBytes + 1024;  // 224 KiB + room to align to 1024
static_assert(kQBytes == kTileBytes, "Q goes through a K slot");
// 128 x 40 + 256 x 232 = 64512 of the SM's 65536 registers
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kBarTurn = 1;  // named barriers kBarTurn + w: "consumer w may issue its MMAs"
constexpr int kBarStore = 3;  // named barriers kBarStore + w: consumer w's own 128 threads

// 2^x as one MUFU.EX2: a result below 2^-126 flushes to 0.
struct Exp2Ftz {
    __device__ __forceinline__ static float apply(float x) {
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
        return y;
    }
};

// How far (exp2 domain) a row's max may rise before the output is rescaled: weights up to 2^8.
constexpr int kLazyLog2 = 8;

// The policy as this step runs it: the softmax with the exponent swapped, the lazy rescale and the
// max as a tree, the gate folded.
template <class Policy>
struct StepPolicy {
    using type = Policy;
};
template <int NB>
struct StepPolicy<SoftmaxPolicy<NB>> {
    using type = SoftmaxPolicy<NB, Exp2Ftz, kLazyLog2, true>;
};
template <int NB>
struct StepPolicy<GatePolicy<NB>> {
    using type = GatePolicy<NB, true>;
};

template <class Policy>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_v_pages_prefill_kernel(Batch a, PolicyParams pp, const __grid_constant__ PageMaps maps, int num_items) {
    extern __shared__ unsigned char smem_raw[];
    // Swizzled tiles must start on 1024-byte boundaries (the swizzle pattern repeats every 8 rows
    // of 128 bytes, and the copy engine and wgmma both read it off the address bits).
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    unsigned char* o_s = smem;                          // [2 consumers][2 halves][64 rows][64]
    unsigned char* k_s = o_s + kOBytes;                 // [kStages][2 halves][128 keys or rows of Q][64]
    unsigned char* v_s = k_s + kStages * kTileBytes;    // [kStages][8 pages][2 halves][16 keys][64]
    __shared__ uint64_t k_full[kStages], k_empty[kStages], v_full[kStages], v_empty[kStages];

    // This CTA's n-th work item (n = 0, 1, ...), or -1 past its last.
    auto item_of = [&](int n) {
        const int G = gridDim.x, b = blockIdx.x;
        const int i = n * G + (n % 2 == 0 ? b : G - 1 - b);
        return i < num_items ? i : -1;
    };
    struct Work {
        int head, kv_head, seq, row0, prefix, n_new, total, kv_end, num_kv_tiles, pages_needed, q_start;
    };
    // An item's description in two parts: what is loaded (its query tile first, then its
    // sequence's lengths and offset, whose addresses need the tile), and what follows from it.
    struct Raw {
        int item, seq, row0, prefix, n_new, q_start;
    };
    auto raw_of = [&](int item, QueryTile tile) {
        Raw r;
        r.item = item;
        r.seq = tile.seq;
        r.row0 = tile.row0;
        r.prefix = a.prefix_lens[tile.seq];
        r.n_new = a.new_lens[tile.seq];
        r.q_start = a.q_start[tile.seq];
        return r;
    };
    auto work_from = [&](const Raw& r) {
        Work t;
        t.head = r.item % a.H;
        t.kv_head = t.head / (a.H / a.Hkv);
        t.seq = r.seq;
        t.row0 = r.row0;
        t.prefix = r.prefix;
        t.n_new = r.n_new;
        t.total = t.prefix + t.n_new;
        t.kv_end = t.prefix + min(t.row0 + kRows, t.n_new);
        t.num_kv_tiles = (t.kv_end + kTile - 1) / kTile;
        t.pages_needed = (t.kv_end + kPageSize - 1) / kPageSize;  // pages any row of the tile sees
        t.q_start = r.q_start;
        return t;
    };
    auto work_of = [&](int item) { return work_from(raw_of(item, a.tiles[item / a.H])); };
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;

    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
            sm90::mbarrier_init(&k_full[s], 1);                // the producer's arrive.expect_tx
            sm90::mbarrier_init(&v_full[s], 32);               // every producer lane (one may have copied)
            sm90::mbarrier_init(&k_empty[s], 4 * kConsumers);  // one arrive per consumer warp
            sm90::mbarrier_init(&v_empty[s], 4 * kConsumers);
        }
        sm90::fence_barrier_init();
    }
    // The P V product always runs over the whole 128-key tile, so in a last tile it multiplies the
    // pages that were not loaded by P = 0, and they must hold finite numbers. Zeroed once here,
    // a slot's pages only ever hold zeros or real V after that.
    for (int i = tid; i < kStages * kTileBytes / 16; i += kThreads)
        reinterpret_cast<uint4*>(v_s)[i] = make_uint4(0, 0, 0, 0);
    sm90::fence_proxy_async_smem();  // ordinary stores, read by wgmma (the async proxy)
    __syncthreads();

    if (wg == 0) {
        // ===================== producer =====================
        sm90::setmaxnreg_dec<kProducerRegs>();
        if (tid / 32 != 0) return;  // one warp issues everything; the other three leave
        int kit = 0, vit = 0;  // Q and K tiles, V tiles issued so far, over all items: the rings' positions
        for (int n = 0, item = item_of(0); item >= 0; item = item_of(++n)) {
            const Work t = work_of(item);
            const int kv_head = t.kv_head, seq = t.seq, num_kv_tiles = t.num_kv_tiles, pages_needed = t.pages_needed;
            const int total = t.total;
            const int* pages = a.block_table + static_cast<size_t>(seq) * a.max_blocks_per_seq;
            {  // Q: the item's query rows through the K ring, ahead of its first K tile
                const int st = kit % kStages;
                sm90::mbarrier_wait(&k_empty[st], ((kit / kStages) & 1) ^ 1);
                if (lane == 0) {
                    sm90::mbarrier_arrive_expect_tx(&k_full[st], kQBytes);
                    const int q_row = t.q_start + t.row0;  // rows past the last sequence read as zeros
                    sm90::tma_load_3d(k_s + st * kTileBytes, &maps.q, &k_full[st], 0, t.head, q_row);
                    sm90::tma_load_3d(k_s + st * kTileBytes + kHalfBytes, &maps.q, &k_full[st], 64, t.head, q_row);
                }
                ++kit;
            }
            for (int j = 0; j < num_kv_tiles; ++j, ++kit, ++vit) {
                const int st = kit % kStages;
                const uint32_t parity = (kit / kStages) & 1;
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
                const int vst = vit % kStages;
                sm90::mbarrier_wait(&v_empty[vst], ((vit / kStages) & 1) ^ 1);
                const int last_valid = total - (first_page + n_pages - 1) * kPageSize;  // tokens in the tile's last page
                const bool partial = last_valid < kPageSize;
                const int tma_pages = partial ? n_pages - 1 : n_pages;
                unsigned char* vd = v_s + vst * kTileBytes;
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
                        *reinterpret_cast<uint4*>(vd + (n_pages - 1) * kPageBytes + half * kPageHalfBytes + row * 128 +
                                                  ((chunk ^ (row % 8)) * 16)) = w;
                    }
                    sm90::fence_proxy_async_smem();  // these ordinary stores are read by wgmma (async proxy)
                }
                if (lane == 0)
                    sm90::mbarrier_arrive_expect_tx(&v_full[vst], tma_pages * 2 * kPageHalfBytes);
                else
                    sm90::mbarrier_arrive(&v_full[vst]);
                __syncwarp();
                if (lane < tma_pages)  // the whole page, both halves, in one copy
                    sm90::tma_load_5d(vd + lane * kPageBytes, &maps.v_pages, &v_full[vst], 0, 0, kv_head, block, 0);
            }
        }
        return;
    }

    // ===================== consumers =====================
    sm90::setmaxnreg_inc<kConsumerRegs>();
    const int w = wg - 1;                  // consumer 0 or 1: rows 64 w .. 64 w + 63 of the tile
    const int warp = (tid / 32) % 4;
    float o[64];
    float s[64];
    uint32_t p[kTile / 16][4];
    uint32_t qf[kD / 16][4];  // this consumer's 64 rows of Q as wgmma A fragments, one per 16-dim step

    // Descriptors. K (B of S = Q K^T) is K-major with the 128-byte swizzle: 8-row groups 1024
    // bytes apart (SBO); a 16-dim step moves the start by 32 bytes inside the swizzled row, and
    // steps 4..7 use the second half. LBO is unused for it (16).
    auto desc_k = [&](int st, int ks) {
        return sm90::make_smem_desc(k_s + st * kTileBytes + (ks / 4) * kHalfBytes + (ks % 4) * 32, 16, 1024,
                                    sm90::Swizzle::b128);
    };
    // V (B of O += P V) is MN-major: a 16-key step is one page, kPageBytes on; along d (N) the
    // page's two 64-dim halves are kPageHalfBytes apart (LBO), along keys its 8-row groups 1024 (SBO).
    auto desc_v = [&](int st, int kt16) {
        return sm90::make_smem_desc(v_s + st * kTileBytes + kt16 * kPageBytes, kPageHalfBytes, 1024, sm90::Swizzle::b128);
    };
    auto release = [&](uint64_t* bar) {  // this warp's wgmma reads of the slot are complete
        __syncwarp();
        if (lane == 0) sm90::mbarrier_arrive(bar);
    };

    // The turn-taking barriers, with the ids fixed at compile time (a run-time id makes the
    // compiler reserve all 16 hardware barriers).
    auto my_turn = [&] {
        if (w == 0) sm90::named_bar_sync<kBarTurn + 0, 256>();
        else sm90::named_bar_sync<kBarTurn + 1, 256>();
    };
    auto your_turn = [&] {
        if (w == 0) sm90::named_bar_arrive<kBarTurn + 1, 256>();
        else sm90::named_bar_arrive<kBarTurn + 0, 256>();
    };
    if (w == 1) sm90::named_bar_arrive<kBarTurn + 0, 256>();  // consumer 0 goes first

    int kit = 0, vit = 0;  // the producer's counts: Q and K tiles, V tiles consumed so far
    int item = item_of(0);
    Raw r_next = raw_of(max(item, 0), a.tiles[max(item, 0) / a.H]);
    QueryTile tile_next2 = a.tiles[max(item_of(1), 0) / a.H];
    for (int n = 0; item >= 0; ++n) {
        const Work t = work_from(r_next);
        const int next = item_of(n + 1);
        // The description two items deep, so that no load's value is needed in the item that
        // issues it: the next item's lengths (its tile came an item ago), the one after's tile.
        if (next >= 0) r_next = raw_of(next, tile_next2);
        const int next2 = item_of(n + 2);
        if (next2 >= 0) tile_next2 = a.tiles[next2 / a.H];
        const int head = t.head, prefix = t.prefix, n_new = t.n_new, num_kv_tiles = t.num_kv_tiles;
        const int i_g = t.row0 + 64 * w + 16 * warp + lane / 4;
        const int last[2] = {prefix + i_g, prefix + i_g + 8};
        const int first_row_last = prefix + t.row0 + 64 * w;
        using Fast = typename StepPolicy<Policy>::type;
        Fast policy = make_policy(pp, static_cast<Fast*>(nullptr));
#pragma unroll
        for (int k = 0; k < 64; ++k) o[k] = 0.f;
        {  // Q into registers from its K slot: row r's 16-byte chunk c sits at chunk c ^ (r % 8) of its 128-byte row
            const int st = kit % kStages;
            const unsigned char* q_s = k_s + st * kTileBytes;  // [2 halves][128 rows][64]
            sm90::mbarrier_wait(&k_full[st], (kit / kStages) & 1);
            const int r = 64 * w + 16 * warp + lane % 16;
#pragma unroll
            for (int ks = 0; ks < kD / 16; ++ks) {
                const int chunk = (ks % 4) * 2 + lane / 16;  // dims ks*16 + (lane / 16) * 8 .. + 8, in half ks / 4
                pa::ldmatrix_x4(qf[ks], reinterpret_cast<const __nv_bfloat16*>(q_s + (ks / 4) * (kQBytes / 2) + r * 128 +
                                                                                ((chunk ^ (r % 8)) * 16)));
            }
            // ldmatrix read the slot through the generic proxy and a bulk copy refills it next: the
            // proxy fence orders the two (GLOSSARY.md, "Proxies")
            sm90::fence_proxy_async_smem();
            release(&k_empty[st]);  // the slot goes back to the producer for a K tile
            ++kit;
        }

        for (int j = 0; j < num_kv_tiles; ++j, ++kit, ++vit) {
            const int st = kit % kStages, prev = (vit + kStages - 1) % kStages;
            sm90::mbarrier_wait(&k_full[st], (kit / kStages) & 1);
            if (j > 0) sm90::mbarrier_wait(&v_full[prev], ((vit - 1) / kStages) & 1);

            // My turn on the tensor cores: S_j = Q K_j^T, then O += P_{j-1} V_{j-1}; two batches.
            my_turn();
            sm90::wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kD / 16; ++ks) sm90::wgmma_m64n128k16_rs<0>(s, qf[ks], desc_k(st, ks), ks > 0);
            sm90::wgmma_commit();
            if (j > 0) {
                sm90::wgmma_fence();  // a batch of its own, which the policy below may run beside
#pragma unroll
                for (int kt16 = 0; kt16 < kPagesPerTile; ++kt16)
                    sm90::wgmma_m64n128k16_rs_transb(o, p[kt16], desc_v(prev, kt16), 1);
            }
            sm90::wgmma_commit();  // (empty for j = 0: two batches every time keep the wait below uniform)
            // The other consumer's turn (consumer 1 skips its very last hand-over: nobody waits for it).
            if (!(w == 1 && j == num_kv_tiles - 1 && next < 0)) your_turn();

            // S_j first (the older batch): the policy starts while P_{j-1} V_{j-1} still runs. Only
            // the output and P's registers must wait for that batch.
            sm90::wgmma_wait<1>();
            sm90::fence_regs(s);
            release(&k_empty[st]);
            const int kv0 = j * kTile;
            float alpha[2];
            // The diagonal tiles (some key past some row's last position) with the mask; the rest without.
            if (kv0 + kTile - 1 > first_row_last) policy.to_p(s, kv0, last, true, lane, alpha);
            else policy.to_p(s, kv0, last, false, lane, alpha);

            sm90::wgmma_wait<0>();  // P_{j-1} V_{j-1} is in O; P's registers are free
            sm90::fence_regs(o);
            if (j > 0) release(&v_empty[prev]);
            rescale_output<Fast>(o, alpha);
#pragma unroll
            for (int kt16 = 0; kt16 < kTile / 16; ++kt16)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    p[kt16][e] = pa::pack2(s[8 * kt16 + 2 * e], s[8 * kt16 + 2 * e + 1], __nv_bfloat16{});
        }
        {  // the last tile's O += P V
            const int st = (vit - 1) % kStages;
            sm90::mbarrier_wait(&v_full[st], ((vit - 1) / kStages) & 1);
            sm90::wgmma_fence();
#pragma unroll
            for (int kt16 = 0; kt16 < kPagesPerTile; ++kt16)
                sm90::wgmma_m64n128k16_rs_transb(o, p[kt16], desc_v(st, kt16), 1);
            sm90::wgmma_commit();
            sm90::wgmma_wait<0>();
            sm90::fence_regs(o);
            release(&v_empty[st]);  // the slot goes back to the producer for the next item
        }

        float out_scale[2];
        policy.finish(out_scale);
        // The output rows in bf16, packed once for both ways of storing them below:
        // ob2[j][r] holds row g + 8 r's two columns of block j.
        uint32_t ob2[kD / 8][2];
#pragma unroll
        for (int j = 0; j < kD / 8; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                ob2[j][r] = pa::pack2(o[4 * j + 2 * r] * out_scale[r], o[4 * j + 2 * r + 1] * out_scale[r], __nv_bfloat16{});
        const int first_row = t.row0 + 64 * w;  // this consumer's first row of the query tile
        // Uniform, but ptxas must be told so through a vote, or it serialises the wgmma (C7520).
        const bool whole = __all_sync(0xffffffffu, first_row + 64 <= n_new);
        if (whole) {
            // The whole 64 rows are this sequence's: through the buffer. Its last store must have read
            // it before it is written again.
            unsigned char* ob = o_s + w * (kOBytes / 2);  // [2 halves][64 rows][64]
            if (tid % 128 == 0) sm90::bulk_wait_read();
            if (w == 0) sm90::named_bar_sync<kBarStore + 0, 128>();
            else sm90::named_bar_sync<kBarStore + 1, 128>();
            // stmatrix x4 per pair of 8-column blocks (d, d + 1): matrices (rows 0-7, d), (rows 8-15, d),
            // (rows 0-7, d + 1), (rows 8-15, d + 1) of this warp's 16 rows; lane l addresses row l % 8
            // of matrix l / 8. Row r's 16-byte chunk c of a half sits at chunk c ^ (r % 8).
            const int mat = lane / 8;
            const int srow = 16 * warp + (mat & 1) * 8 + lane % 8;  // the row this lane addresses
#pragma unroll
            for (int d = 0; d < kD / 8; d += 2) {
                const int blk = d + (mat >> 1);
                unsigned char* addr = ob + (blk / 8) * (kOBytes / 4) + srow * 128 + (((blk % 8) ^ (srow % 8)) * 16);
                sm90::stmatrix_x4(addr, ob2[d][0], ob2[d][1], ob2[d + 1][0], ob2[d + 1][1]);
            }
            sm90::fence_proxy_async_smem();  // these stores are read by the copy engine (async proxy)
            if (w == 0) sm90::named_bar_sync<kBarStore + 0, 128>();
            else sm90::named_bar_sync<kBarStore + 1, 128>();
            if (tid % 128 == 0) {
                const int row = t.q_start + first_row;
                sm90::tma_store_3d(&maps.o, ob, 0, head, row);
                sm90::tma_store_3d(&maps.o, ob + kOBytes / 4, 64, head, row);
                sm90::bulk_commit();
            }
        } else {
            const int c = lane % 4;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int i = i_g + 8 * r;
                // Lanes c and c ^ 1 hold four neighbouring columns of each block between them: one shuffle a
                // pair of blocks gives the even lane block d's four (8 bytes) and the odd lane block d + 1's.
                const bool odd = lane & 1;
                __nv_bfloat16* dst =
                    a.out + ((static_cast<size_t>(t.q_start) + i) * a.H + head) * kD + 2 * (c & 2) + (odd ? 8 : 0);
#pragma unroll
                for (int d = 0; d < kD / 8; d += 2) {
                    const uint32_t u0 = ob2[d][r], u1 = ob2[d + 1][r];
                    const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? u0 : u1, 1);  // every lane, before the test
                    if (i < n_new) *reinterpret_cast<uint2*>(dst + 8 * d) = odd ? make_uint2(got, u1) : make_uint2(u0, got);
                }
            }
        }
        item = next;
    }
    if (tid % 128 == 0) sm90::bulk_wait_all();  // the buffer stays alive until the copy engine is done with it
}

}  // namespace lesson06::step21
