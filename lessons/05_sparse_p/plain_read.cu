// What a plain streaming read of a decode's bytes takes on this GPU, timed like the decode
// variants: the same kernel as the read-bandwidth ceiling of common/ceilings.cu, but over a
// buffer of the decode's own size, L2-cold. At 1 GiB it is the ceiling; at the tens to
// hundreds of MiB of Table C a launch's start and end are a visible share of it, and no
// decode that reads those bytes can be expected to do better.
#include <map>
#include <mutex>
#include <vector>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "lesson05.h"
#include "timer.cuh"

namespace lesson05 {

namespace {

// Reads every 16-byte word once, four independent loads in flight per thread, and folds
// them into a value written only if it matches an impossible pattern.
__global__ void plain_read_kernel(const uint4* __restrict__ data, size_t n, unsigned* __restrict__ sink) {
    unsigned acc = 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride), c = __ldcs(data + i + 2 * stride),
                    d = __ldcs(data + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = __ldcs(data + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

}  // namespace

double plain_read_us(long long bytes) {
    static std::mutex mu;
    static std::map<std::pair<int, long long>, double> cache;  // (device, bytes) -> us
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_pair(device, bytes);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    const pa::DeviceInfo& info = pa::current_device_info();
    const size_t n = static_cast<size_t>(std::max(16LL, bytes)) / sizeof(uint4);
    const int copies = pa::cold_copies(static_cast<long long>(n * sizeof(uint4)), info.l2_bytes);
    std::vector<pa::DeviceBuffer<uint4>> data(copies);
    for (auto& d : data) {
        d.allocate(n);
        d.fill_bytes(0x5a);
    }
    pa::DeviceBuffer<unsigned> sink(1);
    const int threads = 512;
    const int blocks = info.sms * (info.max_threads_per_sm / threads);
    const pa::Timing t = pa::time_kernel(
        [&](int c) {
            plain_read_kernel<<<blocks, threads>>>(data[c].get(), n, sink.get());
            CUDA_CHECK_LAUNCH();
        },
        copies, 10, 100);
    cache[key] = t.us_median;
    return t.us_median;
}

}  // namespace lesson05
