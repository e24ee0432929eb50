// Lesson 02's `--copy-rate` (copy_rate.h): CTAs that only read. Each CTA reads its own
// contiguous region into shared memory and throws it away:
//  * bulk_<N>: cp.async.bulk copies of N bytes into a ring of three tiles, each tile one copy
//    from each issuing thread, as steps 11 and 12's producers issue them: 256 bytes from 128
//    threads is step 11 (a row of D 128 each), 4096 from 8 threads step 12 (a 16-token unit
//    of one KV head's page each); bulk_4096_one issues the units from one thread (a tile is
//    then one copy); 16384 from 2 threads is what pages of 64 tokens would allow. sm_90.
//  * loads_16: 1024 threads, each with eight 16-byte loads in flight, then a few ALU
//    instructions on them (lesson 05's gather floor reads this way). Any GPU.
// The question is the rate of one CTA, where the whole GPU's streaming rate does not bind
// (one CTA), and how that adds up over a full grid (one and two CTAs per SM).
#include "copy_rate.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "launch_utils.cuh"
#include "mbarrier.cuh"

namespace lesson02 {

namespace {

constexpr int kMaxIssuers = 128;  // the consumer is the thread after them

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
    } else if (threadIdx.x == kMaxIssuers) {  // the consumer: touches a word of each tile, frees the slot
        unsigned x = 0;
        for (int s = 0; s < n; ++s) {
            const int slot = s % tiles;
            pa::mbarrier_wait(&full[slot], (s / tiles) & 1);
            x ^= *reinterpret_cast<const unsigned*>(ring + slot * tile_bytes);
            pa::mbarrier_arrive(&empty[slot]);
        }
        if (x == 0x9e3779b9u) *sink = x;  // never true for the zeros read; keeps the reads
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

// Median and minimum of `reps` launches, each after a write of `flush` (twice the L2) so
// that nothing read is in L2; the write itself is outside the events.
template <class Launch>
void time_launches(Launch launch, pa::DeviceBuffer<unsigned char>& flush, CopyRate& r) {
    constexpr int kReps = 7;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> us;
    for (int i = 0; i < kReps + 1; ++i) {  // the first launch is a warm-up
        CUDA_CHECK(cudaMemsetAsync(flush.get(), i, flush.size()));
        CUDA_CHECK(cudaEventRecord(e0));
        launch();
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i > 0) us.push_back(ms * 1e3);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    std::sort(us.begin(), us.end());
    r.us_median = us[us.size() / 2];
    r.us_min = us.front();
}

}  // namespace

std::vector<CopyRate> measure_copy_rates(const pa::DeviceInfo& info, std::string* skipped) {
    const std::string bulk_why = pa::sm90_code_why_not(reinterpret_cast<const void*>(bulk_reader_kernel), info,
                                                       "the bulk readers use cp.async.bulk", "left out");
    if (skipped) *skipped = bulk_why;
    constexpr long long kLoneBytes = 32LL << 20, kGridBytes = 8LL << 20;  // per CTA
    const int grids[] = {1, info.sms, 2 * info.sms};
    const long long total = std::max(kLoneBytes, 2LL * info.sms * kGridBytes);
    pa::DeviceBuffer<unsigned char> data(static_cast<size_t>(total)), flush(static_cast<size_t>(2 * info.l2_bytes));
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
        const int per_sm = ctas <= info.sms ? 1 : 2;
        if (bulk_why.empty()) {
            for (const Bulk& b : bulks) {
                const int smem = b.copy_bytes * b.issuers * kTiles;
                CopyRate r{b.name, b.copy_bytes, b.issuers, smem, ctas, per_sm, per_cta};
                CUDA_CHECK(cudaFuncSetAttribute(bulk_reader_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                time_launches([&] {
                    bulk_reader_kernel<<<ctas, kMaxIssuers + 32, smem>>>(data.get(), per_cta, b.copy_bytes, b.issuers, kTiles,
                                                                        sink.get());
                    CUDA_CHECK_LAUNCH();
                }, flush, r);
                out.push_back(r);
            }
        }
        CopyRate r{"loads_16", 16, kLoadThreads, kLoadThreads * kLoadsInFlight * 16, ctas, per_sm, per_cta};
        time_launches([&] {
            load_reader_kernel<<<ctas, kLoadThreads>>>(reinterpret_cast<const uint4*>(data.get()), per_cta / 16, sink.get());
            CUDA_CHECK_LAUNCH();
        }, flush, r);
        out.push_back(r);
    }
    return out;
}

}  // namespace lesson02
