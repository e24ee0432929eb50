// Lesson 02's `--copy-rate` (copy_rate.h): CTAs that only read into shared memory and throw
// the bytes away.
// Contiguous readers, each CTA its own region:
//  * bulk_<N>: cp.async.bulk copies of N bytes into a ring of three tiles, each tile one copy
//    from each issuing thread, as steps 11 and 12's producers issue them: 256 bytes from 128
//    threads is step 11 (a row of D 128 each), 4096 from 8 threads step 12 (a 16-token unit
//    of one KV head's page each); bulk_4096_one issues the units from one thread (a tile is
//    then one copy); 16384 from 2 threads is what pages of 64 tokens would allow. sm_90.
//  * loads_16: 1024 threads, each with eight 16-byte loads in flight, then a few ALU
//    instructions on them (lesson 05's gather floor reads this way). Any GPU.
// The question is the rate of one CTA, where the whole GPU's streaming rate does not bind
// (one CTA), and how that adds up over a full grid (one and two CTAs per SM).
// Item readers: step 12's grid and copies on a Table A shape's K and V, without its math:
// one CTA per (sequence, KV head), its tiles of 128 tokens K, V, K, V, ..., 8 threads each
// copying one 4 KiB unit of a tile (sm_90), from contiguous K and V or from pages of 16 tokens,
// into units 128-byte aligned or, as step 12 lays them out, 16 bytes apart modulo 128; and the
// same pages read the sm_80 way, 16-byte cp.async from 128 threads (any GPU); and the aligned
// copies in equal shares of the batch's tiles, every SM busy to the end (sm_90).
#include "copy_rate.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_math.cuh"
#include "launch_utils.cuh"
#include "mbarrier.cuh"
#include "paged_cache.h"
#include "shapes.h"
#include "timer.cuh"

namespace lesson02 {

namespace {

constexpr int kMaxIssuers = 128;  // the consumer is the thread after them

// The readers' consumer: one thread waits for each of the n tiles of a ring of `tiles` slots,
// touches a word of it and frees the slot (sm_90: the ring's mbarriers count bulk copies).
__device__ __forceinline__ void consume_tiles(const unsigned char* ring, long long tile_bytes, int tiles, int n,
                                              uint64_t* full, uint64_t* empty, unsigned* sink) {
    unsigned x = 0;
    for (int s = 0; s < n; ++s) {
        const int slot = s % tiles;
        pa::mbarrier_wait(&full[slot], (s / tiles) & 1);
        x ^= *reinterpret_cast<const unsigned*>(ring + slot * tile_bytes);
        pa::mbarrier_arrive(&empty[slot]);
    }
    if (x == 0x9e3779b9u) *sink = x;  // never true for the zeros read; keeps the reads
}

// `issuers` threads copy tile after tile into a ring of `tiles` slots, each tile `issuers`
// copies of `copy_bytes` (thread i issues copy i of every tile, as steps 11 and 12's producers
// do), counted on the slot's mbarrier; one more thread waits for each tile and frees it.
__global__ void bulk_reader_kernel(const unsigned char* __restrict__ src, long long bytes_per_cta, int copy_bytes,
                                   int issuers, int tiles, unsigned* __restrict__ sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // cp.async.bulk: sm_90 (the host leaves other GPUs out)
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ uint64_t full[8], empty[8];  // tiles <= 8
    if (threadIdx.x == 0)
        for (int i = 0; i < tiles; ++i) {
            pa::mbarrier_init(&full[i], issuers);
            pa::mbarrier_init(&empty[i], 1);
        }
    __syncthreads();
    const long long tile_bytes = static_cast<long long>(copy_bytes) * issuers;
    const unsigned char* base = src + blockIdx.x * bytes_per_cta;
    const int n = static_cast<int>(bytes_per_cta / tile_bytes);
    if (threadIdx.x < issuers) {  // the producers: copy threadIdx.x of each tile whenever its slot is free
        for (int s = 0; s < n; ++s) {
            const int slot = s % tiles;
            if (s >= tiles) pa::mbarrier_wait(&empty[slot], (s / tiles + 1) & 1);
            const long long at = static_cast<long long>(threadIdx.x) * copy_bytes;
            pa::mbarrier_arrive_expect_tx(&full[slot], copy_bytes);
            pa::bulk_copy_to_shared(ring + slot * tile_bytes + at, base + s * tile_bytes + at, copy_bytes, &full[slot]);
        }
    } else if (threadIdx.x == kMaxIssuers) {  // the consumer
        consume_tiles(ring, tile_bytes, tiles, n, full, empty, sink);
    }
#else
    __trap();
#endif
}

constexpr int kLoadThreads = 1024;
constexpr int kLoadsInFlight = 8;

__global__ void __launch_bounds__(kLoadThreads) load_reader_kernel(const uint4* __restrict__ src, long long vecs_per_cta,
                                                                   unsigned* __restrict__ sink) {
    const uint4* base = src + blockIdx.x * vecs_per_cta;
    unsigned x = 0;
    for (long long i = threadIdx.x; i < vecs_per_cta; i += static_cast<long long>(kLoadThreads) * kLoadsInFlight) {
        uint4 v[kLoadsInFlight];
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {  // all eight in flight before the first is used
            const long long j = i + static_cast<long long>(u) * kLoadThreads;
            v[u] = j < vecs_per_cta ? __ldcs(base + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (x == 0x9e3779b9u) *sink = x;
}

constexpr int kWarmup = 2, kIters = 7;

// Median and minimum of kIters launches (pa::time_kernel), L2-cold: launch(c) reads copy c of
// its bytes, and there are enough copies that each launch finds its own out of the L2.
template <class Launch>
void time_cold(Launch launch, int copies, CopyRate& r) {
    const pa::Timing t = pa::time_kernel(launch, copies, kWarmup, kIters);
    r.us_median = t.us_median;
    r.us_min = t.us_min;
}

// Copies of `bytes` a launch that L2-cold timing rotates through: one where a launch reads
// more than twice the L2 already (the next launch's first bytes are long gone).
int copies_for(long long bytes, const pa::DeviceInfo& info) {
    return bytes > 2 * info.l2_bytes ? 1 : pa::cold_copies(bytes, info.l2_bytes);
}

constexpr int kUnitBytes = 4096;  // 16 tokens x D 128 x 2 bytes: one KV head's page
constexpr int kTilePages = 8;     // 128 tokens a tile, step 12's
constexpr int kItemThreads = 64;  // warp 0: the 8 issuing threads; thread 32: the consumer

constexpr int kPaddedUnit = kUnitBytes + 16;  // step 12's UnitTile: units 16 bytes apart modulo 128
constexpr int kPaddedSlot = 34816;            // step 12's ring slot at D 128: 128 rows of 136 elements

// Unit p of item (seq, head): at (table[seq][p] * hkv + head) units into its pool, or with no
// table at ((seq * hkv + head) * pages + p) units (the layouts below).
__device__ __forceinline__ long long item_unit(const int* table, int max_blocks, int pages, int seq, int hkv, int head,
                                               int p) {
    return table ? static_cast<long long>(table[static_cast<long long>(seq) * max_blocks + p]) * hkv + head
                 : (static_cast<long long>(seq) * hkv + head) * pages + p;
}

// The batch's token tiles in item order (sequence, KV head, tile), each tile K then V: with
// total_tiles 0 the grid is (Hkv, B) and CTA (h, b) reads the tiles of KV head h of sequence b
// (an item a CTA); otherwise CTA c of G reads tiles [c T / G, (c + 1) T / G) of the T =
// total_tiles, whichever items they fall in (equal shares). Unit p of an item is item_unit's
// (pages of 16 tokens, [blocks, Hkv, 16, D], through the table, or [B, Hkv, ctx, D] without
// one). Thread i < 8 copies unit i of each tile to UNIT_STRIDE bytes times i into the tile's
// slot, reading its page id just before, as step 12's producers do.
template <int UNIT_STRIDE>
__global__ void __launch_bounds__(kItemThreads) item_reader_kernel(const unsigned char* __restrict__ k,
                                                                   const unsigned char* __restrict__ v,
                                                                   const int* __restrict__ table, int max_blocks,
                                                                   int pages, int hkv, int total_tiles,
                                                                   unsigned* __restrict__ sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // cp.async.bulk: sm_90 (the host leaves other GPUs out)
    constexpr int kTiles = 3;
    constexpr int kTileBytes = UNIT_STRIDE == kUnitBytes ? kUnitBytes * kTilePages : kPaddedSlot;
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ uint64_t full[kTiles], empty[kTiles];
    if (threadIdx.x == 0)
        for (int i = 0; i < kTiles; ++i) {
            pa::mbarrier_init(&full[i], kTilePages);
            pa::mbarrier_init(&empty[i], 1);
        }
    __syncthreads();
    const int tiles_per_item = pages / kTilePages;
    const long long c = blockIdx.y * gridDim.x + blockIdx.x;
    const int first = static_cast<int>(total_tiles ? c * total_tiles / gridDim.x : c * tiles_per_item);
    const int end = static_cast<int>(total_tiles ? (c + 1) * total_tiles / gridDim.x : first + tiles_per_item);
    const int n = 2 * (end - first);  // K V K V ...
    if (threadIdx.x < kTilePages) {
        for (int s = 0; s < n; ++s) {
            const int slot = s % kTiles;
            if (s >= kTiles) pa::mbarrier_wait(&empty[slot], (s / kTiles + 1) & 1);
            const int tile = first + s / 2, item = tile / tiles_per_item;
            const int p = (tile % tiles_per_item) * kTilePages + threadIdx.x;
            const long long unit = item_unit(table, max_blocks, pages, item / hkv, hkv, item % hkv, p);
            pa::mbarrier_arrive_expect_tx(&full[slot], kUnitBytes);
            pa::bulk_copy_to_shared(ring + slot * kTileBytes + threadIdx.x * UNIT_STRIDE, (s & 1 ? v : k) + unit * kUnitBytes,
                                    kUnitBytes, &full[slot]);
        }
    } else if (threadIdx.x == 32) {  // the consumer
        consume_tiles(ring, kTileBytes, kTiles, n, full, empty, sink);
    }
#else
    __trap();
#endif
}

constexpr int kLoadItemThreads = 128;  // cuDNN's decode CTA (lesson 04's NOTES, "Against cuDNN")

// The same items, tiles and ring as item_reader_kernel, read the sm_80 way: every thread
// copies 16 of each tile's 2048 16-byte pieces with cp.async (two of each unit, whose page id
// it reads first), tile s + 2 issued as soon as every thread is past tile s - 1. Any GPU.
__global__ void __launch_bounds__(kLoadItemThreads) item_loads_kernel(const unsigned char* __restrict__ k,
                                                                      const unsigned char* __restrict__ v,
                                                                      const int* __restrict__ table, int max_blocks,
                                                                      int pages, unsigned* __restrict__ sink) {
    constexpr int kTiles = 3;
    constexpr int kTileBytes = kUnitBytes * kTilePages;
    constexpr int kPieces = kUnitBytes / 16 / kLoadItemThreads;  // a thread's pieces of a unit: 2
    extern __shared__ __align__(128) unsigned char ring[];
    const int head = blockIdx.x, hkv = gridDim.x, seq = blockIdx.y;
    const int n = 2 * (pages / kTilePages);  // K0 V0 K1 V1 ...
    auto issue = [&](int s) {
        if (s < n) {
            unsigned char* slot = ring + (s % kTiles) * kTileBytes;
#pragma unroll
            for (int u = 0; u < kTilePages; ++u) {
                const int p = (s / 2) * kTilePages + u;
                const long long unit = item_unit(table, max_blocks, pages, seq, hkv, head, p);
                const unsigned char* src = (s & 1 ? v : k) + unit * kUnitBytes;
#pragma unroll
                for (int i = 0; i < kPieces; ++i) {
                    const int at = (i * kLoadItemThreads + threadIdx.x) * 16;
                    pa::cp_async16(slot + u * kUnitBytes + at, src + at);
                }
            }
        }
        pa::cp_async_commit();  // an empty group past the end keeps the count
    };
    issue(0);
    issue(1);
    unsigned x = 0;
    for (int s = 0; s < n; ++s) {
        pa::cp_async_wait<1>();  // this thread's pieces of tile s have landed
        __syncthreads();         // everyone's have, and everyone is done with tile s - 1
        x ^= *reinterpret_cast<const unsigned*>(ring + (s % kTiles) * kTileBytes + threadIdx.x * 16);
        issue(s + 2);            // into tile s - 1's slot
    }
    if (x == 0x9e3779b9u) *sink = x;  // never true for the zeros read; keeps the reads
}

}  // namespace

std::vector<CopyRate> measure_copy_rates(const pa::DeviceInfo& info, std::string* skipped) {
    const std::string bulk_why = pa::sm90_code_why_not(reinterpret_cast<const void*>(bulk_reader_kernel), info,
                                                       "the bulk readers use cp.async.bulk", "left out");
    if (skipped) *skipped = bulk_why;
    constexpr long long kLoneBytes = 32LL << 20, kGridBytes = 8LL << 20;  // per CTA
    const int grids[] = {1, info.sms, 2 * info.sms};
    long long total = 0;
    for (const int ctas : grids) {
        const long long launch = ctas * (ctas == 1 ? kLoneBytes : kGridBytes);
        total = std::max(total, launch * copies_for(launch, info));
    }
    pa::DeviceBuffer<unsigned char> data(static_cast<size_t>(total));
    pa::DeviceBuffer<unsigned> sink(1);
    data.fill_bytes(0);
    // A ring of 3 tiles of a copy per issuing thread: 32 KiB each (96 KiB in flight, step 12's
    // ring at two CTAs per SM), 4 KiB for the one-thread reader.
    struct Bulk {
        const char* name;
        int copy_bytes, issuers;
    };
    const Bulk bulks[] = {{"bulk_256", 256, 128},       // step 11: a row per copy, 128 producer threads
                          {"bulk_4096", 4096, 8},       // step 12: a unit per copy, 8 producer threads
                          {"bulk_4096_one", 4096, 1},   // the same copies, all from one thread
                          {"bulk_16384", 16384, 2}};   // pages of 64 tokens would allow this
    constexpr int kTiles = 3;  // the kernel has barriers for 8
    std::vector<CopyRate> out;
    for (const int ctas : grids) {
        const long long per_cta = ctas == 1 ? kLoneBytes : kGridBytes;
        const long long launch_bytes = per_cta * ctas;
        const int copies = copies_for(launch_bytes, info);
        const int per_sm = ctas <= info.sms ? 1 : 2;
        const std::string shape = "read-" + std::to_string(ctas) + "ctas";
        if (bulk_why.empty()) {
            for (const Bulk& b : bulks) {
                const int smem = b.copy_bytes * b.issuers * kTiles;
                CopyRate r{b.name, shape, b.copy_bytes, b.issuers, smem, ctas, per_sm, per_cta};
                CUDA_CHECK(cudaFuncSetAttribute(bulk_reader_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                time_cold([&](int c) {
                    bulk_reader_kernel<<<ctas, kMaxIssuers + 32, smem>>>(data.get() + c * launch_bytes, per_cta, b.copy_bytes,
                                                                        b.issuers, kTiles, sink.get());
                    CUDA_CHECK_LAUNCH();
                }, copies, r);
                out.push_back(r);
            }
        }
        CopyRate r{"loads_16", shape, 16, kLoadThreads, kLoadThreads * kLoadsInFlight * 16, ctas, per_sm, per_cta};
        time_cold([&](int c) {
            load_reader_kernel<<<ctas, kLoadThreads>>>(reinterpret_cast<const uint4*>(data.get() + c * launch_bytes),
                                                       per_cta / 16, sink.get());
            CUDA_CHECK_LAUNCH();
        }, copies, r);
        out.push_back(r);
    }
    return out;
}

std::vector<CopyRate> measure_item_reads(const pa::DeviceInfo& info, const std::vector<std::string>& shapes,
                                         std::string* skipped) {
    const std::string why = pa::sm90_code_why_not(reinterpret_cast<const void*>(item_reader_kernel<kUnitBytes>), info,
                                                  "the bulk item readers use cp.async.bulk", "left out");
    if (skipped) *skipped = why;
    struct Item {
        const char* name;
        const void* kernel;  // nullptr: the cp.async reader
        bool paged;
        int smem;
    };
    const Item items[] = {
        {"items_contiguous", reinterpret_cast<const void*>(item_reader_kernel<kUnitBytes>), false, 3 * kTilePages * kUnitBytes},
        {"items_pages16", reinterpret_cast<const void*>(item_reader_kernel<kUnitBytes>), true, 3 * kTilePages * kUnitBytes},
        {"items_pages16_pad16", reinterpret_cast<const void*>(item_reader_kernel<kPaddedUnit>), true, 3 * kPaddedSlot},
        {"items_loads_pages16", nullptr, true, 3 * kTilePages * kUnitBytes}};
    std::vector<CopyRate> out;
    pa::DeviceBuffer<unsigned> sink(1);
    for (const std::string& name : shapes) {
        const std::optional<pa::DecodeShape> s = pa::find_shape(name);
        const int ctx = s ? s->max_ctx() : 0;
        // The readers copy whole tiles of 4 KiB units: D 128 at 2 bytes, pages of 16, one length.
        if (!s || s->D * 2 * s->block_size != kUnitBytes || ctx % (kTilePages * s->block_size) != 0 ||
            std::any_of(s->ctx.begin(), s->ctx.end(), [&](int c) { return c != ctx; })) {
            std::fprintf(stderr, "error: the item readers take Table A shapes of one length, a multiple of 128: %s\n",
                         name.c_str());
            std::exit(2);
        }
        const int pages = ctx / s->block_size;
        const pa::BlockTable bt = pa::build_block_table(s->ctx, s->block_size, 1, 0x5eedULL);
        const pa::DeviceBuffer<int> table(bt.table);
        const long long pool = static_cast<long long>(bt.num_blocks) * s->Hkv * kUnitBytes;  // >= the contiguous K
        const int copies = copies_for(2 * pool, info);
        pa::DeviceBuffer<unsigned char> k(static_cast<size_t>(pool * copies)), v(static_cast<size_t>(pool * copies));
        k.fill_bytes(0);
        v.fill_bytes(0);
        const dim3 grid(s->Hkv, s->B);
        const int ctas = s->Hkv * s->B;
        const long long per_cta = 2LL * pages * kUnitBytes;
        for (const Item& it : items) {
            const bool bulk = it.kernel != nullptr;
            if (bulk && !why.empty()) continue;
            const void* kernel = bulk ? it.kernel : reinterpret_cast<const void*>(item_loads_kernel);
            const int threads = bulk ? kItemThreads : kLoadItemThreads;
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, it.smem));
            const int per_sm = pa::resident_ctas_per_sm(kernel, threads, it.smem);
            CopyRate r{it.name, name, bulk ? kUnitBytes : 16, bulk ? kTilePages : kLoadItemThreads, it.smem, ctas,
                       std::min(per_sm, (ctas + info.sms - 1) / info.sms), per_cta};
            time_cold([&](int c) {
                const unsigned char* kc = k.get() + c * pool;
                const unsigned char* vc = v.get() + c * pool;
                const int* t = it.paged ? table.get() : nullptr;
                int max_blocks = bt.max_blocks_per_seq, n = pages, hkv = s->Hkv, whole_items = 0;
                unsigned* out_word = sink.get();
                void* bulk_args[] = {&kc, &vc, &t, &max_blocks, &n, &hkv, &whole_items, &out_word};
                void* load_args[] = {&kc, &vc, &t, &max_blocks, &n, &out_word};
                CUDA_CHECK(cudaLaunchKernel(kernel, grid, dim3(threads), bulk ? bulk_args : load_args,
                                            static_cast<size_t>(it.smem), nullptr));
            }, copies, r);
            out.push_back(r);
        }
        if (!why.empty()) continue;
        // Equal shares of the same pages, one and two CTAs per SM.
        const int total_tiles = ctas * (pages / kTilePages);
        constexpr int kShareSmem = 3 * kTilePages * kUnitBytes;  // items_pages16's ring
        CUDA_CHECK(cudaFuncSetAttribute(item_reader_kernel<kUnitBytes>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        kShareSmem));
        for (const int per_sm : {1, 2}) {
            const int grid_ctas = per_sm * info.sms;
            CopyRate r{per_sm == 1 ? "shares_pages16_1" : "shares_pages16_2", name, kUnitBytes, kTilePages, kShareSmem,
                       grid_ctas, per_sm, per_cta * ctas / grid_ctas};
            time_cold([&](int c) {
                item_reader_kernel<kUnitBytes><<<grid_ctas, kItemThreads, kShareSmem>>>(
                    k.get() + c * pool, v.get() + c * pool, table.get(), bt.max_blocks_per_seq, pages, s->Hkv, total_tiles,
                    sink.get());
                CUDA_CHECK_LAUNCH();
            }, copies, r);
            out.push_back(r);
        }
    }
    return out;
}

}  // namespace lesson02
