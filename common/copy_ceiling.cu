#include "copy_ceiling.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <utility>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "timer.cuh"

namespace pa {

namespace {

constexpr int kWarmup = 3, kIters = 20;

// Restores the current device when it goes out of scope.
struct CurrentDevice {
    int previous = 0;
    explicit CurrentDevice(int device) {
        CUDA_CHECK(cudaGetDevice(&previous));
        CUDA_CHECK(cudaSetDevice(device));
    }
    ~CurrentDevice() { cudaSetDevice(previous); }
};

}  // namespace

double measured_copy_bandwidth_gbps(const DeviceInfo& info) {
    static std::map<int, double> cached;
    if (auto it = cached.find(info.device); it != cached.end()) return it->second;
    CurrentDevice on(info.device);
    // 1 GiB or 16 x L2, whichever is larger (two buffers: at most an eighth of the card each)
    long long bytes = std::max(1LL << 30, 16 * info.l2_bytes);
    bytes = std::min(bytes, info.global_mem_bytes / 8) / 16 * 16;
    DeviceBuffer<unsigned char> src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
    src.fill_bytes(0x5a);
    const Timing t = time_kernel(
        [&](int) { CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice)); },
        1, kWarmup, kIters);
    return cached[info.device] = 2.0 * static_cast<double>(bytes) / (t.us_median * 1e-6) / 1e9;
}

double measured_peer_bandwidth_gbps(int src_device, int dst_device) {
    static std::map<std::pair<int, int>, double> cached;
    if (auto it = cached.find({src_device, dst_device}); it != cached.end()) return it->second;
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer<unsigned char> dst;
    {
        CurrentDevice on(dst_device);
        dst.allocate(bytes);
    }
    CurrentDevice on(src_device);
    DeviceBuffer<unsigned char> src(bytes);
    src.fill_bytes(0x5a);
    const Timing t = time_kernel(
        [&](int) { CUDA_CHECK(cudaMemcpyPeerAsync(dst.get(), dst_device, src.get(), src_device, bytes)); }, 1, kWarmup,
        kIters);
    return cached[{src_device, dst_device}] = 2.0 * static_cast<double>(bytes) / (t.us_median * 1e-6) / 1e9;
}

}  // namespace pa
