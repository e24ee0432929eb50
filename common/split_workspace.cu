#include "split_workspace.cuh"

#include "cuda_check.cuh"

namespace pa {

SplitBuffers& SplitWorkspace::at_least(size_t floats, size_t counters) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu_);
    SplitBuffers& b = per_device_[device];
    if (b.floats.size() < floats) {
        CUDA_CHECK(cudaDeviceSynchronize());  // a launch in flight may still use the old buffer
        b.floats.allocate(floats);
    }
    if (b.counters.size() < counters) {
        CUDA_CHECK(cudaDeviceSynchronize());
        b.counters.allocate(counters);
        b.counters.fill_bytes(0);
    }
    return b;
}

}  // namespace pa
