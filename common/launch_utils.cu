#include "launch_utils.cuh"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "cuda_check.cuh"
#include "device_info.cuh"
#include "smem_cap.h"
#include "table.h"

namespace pa {

namespace {

int current_device() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    return device;
}

// A device attribute of the current device, read from the driver once per device.
int cached_attribute(cudaDeviceAttr attr) {
    static std::mutex mu;
    static std::map<std::pair<int, int>, int> values;
    const std::pair<int, int> key{current_device(), static_cast<int>(attr)};
    std::lock_guard<std::mutex> lock(mu);
    auto it = values.find(key);
    if (it == values.end()) {
        int v = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, key.first));
        it = values.emplace(key, v).first;
    }
    return it->second;
}

}  // namespace

int current_sm_count() { return cached_attribute(cudaDevAttrMultiProcessorCount); }

int current_max_smem_optin() { return capped_smem_per_cta(cached_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)); }


namespace {

// A kernel's attributes on the current device, asked of the driver once per (device, kernel):
// max_dynamic_smem and ptx_version are asked on launch paths (a variant's why_not inside
// `auto`, every launch's opt-in, every split-k reduce), then looked up. Only fields fixed at
// compile time are read from it.
const cudaFuncAttributes& kernel_attributes(const void* kernel) {  // map entries never move
    static std::mutex mu;
    static std::map<std::pair<int, const void*>, cudaFuncAttributes> known;
    const std::pair<int, const void*> key{current_device(), kernel};
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(key);
    if (it == known.end()) {
        cudaFuncAttributes attr{};
        CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
        it = known.emplace(key, attr).first;
    }
    return it->second;
}

}  // namespace

int max_dynamic_smem(const void* kernel) {
    // static shared memory counts against the same limit
    return current_max_smem_optin() - static_cast<int>(kernel_attributes(kernel).sharedSizeBytes);
}

int ptx_version(const void* kernel) { return kernel_attributes(kernel).ptxVersion; }

int resident_ctas_per_sm(const void* kernel, int threads, int dynamic_smem) {
    int ctas = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, threads, dynamic_smem));
    if (smem_cap_bytes() > 0) {  // the driver knows the real SM; a capped one holds fewer
        const int per_sm = capped_smem_per_sm(cached_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor));
        const int per_cta = dynamic_smem + static_cast<int>(kernel_attributes(kernel).sharedSizeBytes) +
                            cached_attribute(cudaDevAttrReservedSharedMemoryPerBlock);
        ctas = std::min(ctas, per_cta > 0 ? per_sm / per_cta : ctas);
    }
    return ctas;
}

std::string sm90_code_why_not(const void* kernel, const DeviceInfo& info, const std::string& what,
                              const std::string& instead) {
    if (info.cc_major < 9)
        return strf("%s, which needs sm_90; this GPU (%s) is sm_%d%d (%s)", what.c_str(), info.name.c_str(), info.cc_major,
                    info.cc_minor, instead.c_str());
    const int ptx = ptx_version(kernel);
    if (ptx < 90)
        return strf("%s, and this build has no sm_90 code for it (compute_%d; build with CMAKE_CUDA_ARCHITECTURES 90a)",
                    what.c_str(), ptx);
    return "";
}

int max_cluster_ctas(const void* kernel, int threads, int smem) {
    if (cached_attribute(cudaDevAttrComputeCapabilityMajor) < 9) return 0;
    return max_active_clusters(kernel, threads, smem, 16) >= 1 ? 16 : 8;
}

int max_active_clusters(const void* kernel, int threads, int smem, int cluster_ctas) {
    static std::mutex mu;
    static std::map<std::tuple<int, const void*, int, int, int>, int> known;
    if (cached_attribute(cudaDevAttrComputeCapabilityMajor) < 9) return 0;
    const auto key = std::make_tuple(current_device(), kernel, threads, smem, cluster_ctas);
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(key);
    if (it == known.end()) {  // once per key: the query needs the kernel's smem opt-in (and, past 8 CTAs, its leave)
        opt_in_max_dynamic_smem(kernel);
        if (cluster_ctas > 8) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        const ClusterLaunch l(dim3(1, 1, cluster_ctas), dim3(threads), smem, nullptr, dim3(1, 1, cluster_ctas));
        int clusters = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &l.cfg));
        it = known.emplace(key, clusters).first;
    }
    return it->second;
}

void opt_in_max_dynamic_smem(const void* kernel) {
    static std::mutex mu;
    static std::set<std::pair<int, const void*>> done;  // the attribute is set per device
    const std::pair<int, const void*> key{current_device(), kernel};
    const int limit = max_dynamic_smem(kernel);
    std::lock_guard<std::mutex> lock(mu);
    if (done.count(key)) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    done.insert(key);
}

}  // namespace pa
