#include "launch_utils.cuh"

#include <mutex>
#include <set>

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

}  // namespace pa
