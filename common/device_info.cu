#include "device_info.cuh"

#include <map>
#include <mutex>

#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "flags.h"
#include "smem_cap.h"
#include "table.h"

namespace pa {

static std::string version_string(int v) { return strf("%d.%d", v / 1000, (v % 1000) / 10); }

std::string DeviceInfo::cuda_version_string() const {
    return "runtime " + version_string(runtime_version) + ", driver " + version_string(driver_version);
}

std::string DeviceInfo::summary() const {
    return strf("%s (sm_%d%d), %d SMs, L2 %.0f MiB, smem %d KiB/CTA %d KiB/SM, CUDA %s%s", name.c_str(), cc_major,
                cc_minor, sms, l2_bytes / 1048576.0, smem_per_block_optin / 1024, smem_per_sm / 1024,
                cuda_version_string().c_str(), smem_cap_note().c_str());
}

bool gpu_available(std::string* why) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        if (why) *why = cudaGetErrorString(err);
        cudaGetLastError();  // clear the sticky-free error so later calls are not confused
        return false;
    }
    if (count == 0) {
        if (why) *why = "no CUDA device found";
        return false;
    }
    return true;
}

static std::string make_short_name(const std::string& name) {
    std::string lower;
    for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* known : {"h200", "h100", "a100", "l40s", "l4", "rtx 4090", "rtx 3090"})
        if (lower.find(known) != std::string::npos) {
            std::string s = known;
            std::replace(s.begin(), s.end(), ' ', '-');
            return s;
        }
    std::string s;
    for (char c : lower) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    return s;
}

static DeviceInfo query_device() {
    DeviceInfo info;
    CUDA_CHECK(cudaGetDevice(&info.device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, info.device));
    info.name = prop.name;
    info.short_name = make_short_name(info.name);
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.sms = prop.multiProcessorCount;
    info.l2_bytes = prop.l2CacheSize;
    info.global_mem_bytes = static_cast<long long>(prop.totalGlobalMem);
    // PA_SMEM_CAP_KIB (smem_cap.h) lowers both, so that every rule reading them chooses as a
    // GPU with less shared memory would.
    info.smem_per_block_optin = capped_smem_per_cta(static_cast<int>(prop.sharedMemPerBlockOptin));
    info.smem_per_sm = capped_smem_per_sm(static_cast<int>(prop.sharedMemPerMultiprocessor));
    info.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
    CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
    return info;
}

const DeviceInfo& current_device_info() {
    static std::mutex mu;
    static std::map<int, DeviceInfo> infos;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu);
    auto it = infos.find(device);
    if (it == infos.end()) it = infos.emplace(device, query_device()).first;
    return it->second;
}

DeviceInfo require_gpu(const std::string& program) {
    std::string why;
    if (!gpu_available(&why)) {
        std::fprintf(stderr, "%s: no usable CUDA GPU (%s); nothing to run\n", program.c_str(), why.c_str());
        std::exit(kExitNoGpu);
    }
    try {
        smem_cap_bytes();
    } catch (const FlagError& e) {
        std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
        std::exit(kExitBadInput);
    }
    return current_device_info();
}

void require_compute_capability(const DeviceInfo& info, int major, int minor, const std::string& program,
                                const std::string& why) {
    if (info.cc_major * 10 + info.cc_minor < major * 10 + minor) {
        std::fprintf(stderr, "%s: needs compute capability %d.%d or newer (%s); this GPU, %s, is %d.%d\n",
                     program.c_str(), major, minor, why.c_str(), info.name.c_str(), info.cc_major, info.cc_minor);
        std::exit(kExitNoGpu);
    }
}

}  // namespace pa
