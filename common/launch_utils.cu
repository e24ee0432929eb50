#include "launch_utils.cuh"

#include <map>
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

int current_sm_count() {
    static std::mutex mu;
    static std::map<int, int> sms_of_device;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu);
    auto it = sms_of_device.find(device);
    if (it == sms_of_device.end()) {
        int sms = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        it = sms_of_device.emplace(device, sms).first;
    }
    return it->second;
}

}  // namespace pa
