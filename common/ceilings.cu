#include "ceilings.cuh"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "timer.cuh"

namespace pa {

namespace {

// Reads every 16-byte word once and folds it into one value per thread, written only
// if it matches an impossible pattern, so the loads cannot be optimised away.
__global__ void streaming_read_kernel(const uint4* __restrict__ data, size_t n, unsigned* __restrict__ sink) {
    unsigned acc = 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    // four independent loads in flight per thread
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

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
        x ^= x >> 15; x *= 2246822519u; x ^= x >> 13;
        p[i] = __float2bfloat16((x & 0xffff) / 32768.0f - 1.0f);
    }
}

void cublas_check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw CudaError(std::string("cuBLAS: ") + what + " failed with status " + std::to_string(static_cast<int>(s)));
}

}  // namespace

double measured_read_bandwidth_gbps(const DeviceInfo& info) {
    static double cached = 0;
    if (cached > 0) return cached;
    // 1 GiB or 16 x L2, whichever is larger (and at most a quarter of the card).
    long long bytes = std::max(1LL << 30, 16 * info.l2_bytes);
    bytes = std::min(bytes, info.global_mem_bytes / 4);
    const size_t n = static_cast<size_t>(bytes) / sizeof(uint4);
    DeviceBuffer<uint4> data(n);
    data.fill_bytes(0x5a);
    DeviceBuffer<unsigned> sink(1);
    const int threads = 512;
    const int blocks = info.sms * (info.max_threads_per_sm / threads);
    const Timing t = time_kernel(
        [&](int) {
            streaming_read_kernel<<<blocks, threads>>>(data.get(), n, sink.get());
            CUDA_CHECK_LAUNCH();
        },
        1, 5, 30);
    cached = static_cast<double>(n * sizeof(uint4)) / (t.us_median * 1e-6) / 1e9;
    return cached;
}

double streaming_read_us(const DeviceInfo& info, long long bytes) {
    static std::mutex mu;
    static std::map<std::pair<int, long long>, double> cache;  // (device, bytes) -> us
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_pair(info.device, bytes);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    const size_t n = static_cast<size_t>(std::max(16LL, bytes)) / sizeof(uint4);
    const int copies = cold_copies(static_cast<long long>(n * sizeof(uint4)), info.l2_bytes);
    std::vector<DeviceBuffer<uint4>> data(copies);
    for (auto& d : data) {
        d.allocate(n);
        d.fill_bytes(0x5a);
    }
    DeviceBuffer<unsigned> sink(1);
    const int threads = 512;
    const int blocks = info.sms * (info.max_threads_per_sm / threads);
    const Timing t = time_kernel(
        [&](int c) {
            streaming_read_kernel<<<blocks, threads>>>(data[c].get(), n, sink.get());
            CUDA_CHECK_LAUNCH();
        },
        copies, 10, 100);
    cache[key] = t.us_median;
    return t.us_median;
}

double measured_bf16_gemm_tflops() {
    static double cached = 0;
    if (cached > 0) return cached;
    const int m = 8192, n = 8192, k = 8192;
    DeviceBuffer<__nv_bfloat16> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n), c(static_cast<size_t>(m) * n);
    fill_random_bf16<<<1024, 256>>>(a.get(), a.size(), 1u);
    CUDA_CHECK_LAUNCH();
    fill_random_bf16<<<1024, 256>>>(b.get(), b.size(), 2u);
    CUDA_CHECK_LAUNCH();
    cublasHandle_t handle;
    cublas_check(cublasCreate(&handle), "cublasCreate");
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&](int) {
        cublas_check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.get(), CUDA_R_16BF, m, b.get(),
                                  CUDA_R_16BF, k, &beta, c.get(), CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
    };
    Timing t;
    try {
        t = time_kernel(gemm, 1, 3, 10);
    } catch (...) {
        cublasDestroy(handle);
        throw;
    }
    cublas_check(cublasDestroy(handle), "cublasDestroy");
    cached = 2.0 * m * n * static_cast<double>(k) / (t.us_median * 1e-6) / 1e12;
    return cached;
}

}  // namespace pa
