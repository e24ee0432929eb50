#include "launch_utils.cuh"

#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "cuda_check.cuh"

namespace pa {

int max_dynamic_smem(const void* kernel) {
    int device = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    return optin - static_cast<int>(attr.sharedSizeBytes);  // static shared memory counts against the same limit
}

void opt_in_max_dynamic_smem(const void* kernel) {
    static std::mutex mu;
    static std::set<const void*> done;
    std::lock_guard<std::mutex> lock(mu);
    if (done.count(kernel)) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_dynamic_smem(kernel)));
    done.insert(kernel);
}

namespace {

// A device attribute of the current device, read from the driver once per device.
int cached_attribute(cudaDeviceAttr attr) {
    static std::mutex mu;
    static std::map<std::pair<int, int>, int> values;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu);
    const std::pair<int, int> key{device, static_cast<int>(attr)};
    auto it = values.find(key);
    if (it == values.end()) {
        int v = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
        it = values.emplace(key, v).first;
    }
    return it->second;
}

}  // namespace

int current_sm_count() { return cached_attribute(cudaDevAttrMultiProcessorCount); }

int current_max_smem_optin() { return cached_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin); }

}  // namespace pa
