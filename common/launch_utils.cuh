// Small launch-side helpers.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "cuda_check.cuh"

namespace pa {

struct DeviceInfo;

// Above 48 KiB a kernel must opt in to more dynamic shared memory. This raises the
// kernel's limit to the device maximum, once per (device, kernel) (later calls are a lookup), so
// launchers can call it every time without adding host work to timed launches.
void opt_in_max_dynamic_smem(const void* kernel);

// The most dynamic shared memory one CTA of `kernel` can have on the current device:
// the per-block opt-in limit less the kernel's own static shared memory. Asked of the driver
// once per (device, kernel), then looked up.
int max_dynamic_smem(const void* kernel);

// CTAs of `kernel` (`threads` threads, `dynamic_smem` bytes of dynamic shared memory) resident
// on one SM of the current device: the driver's occupancy calculator, lowered to what an SM of
// PA_SMEM_CAP_KIB (smem_cap.h) would hold. Every launch plan asks this, never the driver.
int resident_ctas_per_sm(const void* kernel, int threads, int dynamic_smem);

// The virtual architecture `kernel` was compiled from, as the driver loaded it on the current
// device: 90 for sm_90a code, 80 for an sm_80 build that the driver JIT-compiled on a newer
// GPU (whose code then has none of the sm_90 instructions). Asked once per (device, kernel).
int ptx_version(const void* kernel);

// "" when `kernel` runs its sm_90 code here: the GPU is sm_90 or newer and the kernel was built
// with sm_90 code (ptx_version >= 90). Otherwise one line that starts with `what` (e.g.
// "unit copies use cp.async.bulk") and ends with `instead` (what runs here instead).
std::string sm90_code_why_not(const void* kernel, const DeviceInfo& info, const std::string& what,
                              const std::string& instead);

// The most CTAs a thread-block cluster of `kernel` (`threads` threads and `smem` bytes of
// dynamic shared memory a CTA) may hold on the current device: 16 where one cluster of 16 fits
// a GPC (the kernel is first allowed that non-portable size), else the portable 8; 0 below
// sm_90, which has no clusters. max_active_clusters for a cluster of 16, at least one or none.
int max_cluster_ctas(const void* kernel, int threads, int smem);
// cudaLaunchKernelEx's configuration of `grid` CTAs of `block` threads and `smem` bytes of dynamic
// shared memory on `stream`, in thread-block clusters of `cluster` CTAs (sm_90; the attribute is
// set, numAttrs 1, also for a cluster of one). Not copyable: cfg points at the attribute it holds.
struct ClusterLaunch {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute cluster = {};
    ClusterLaunch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster_dims) {
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = stream;
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim.x = cluster_dims.x;
        cluster.val.clusterDim.y = cluster_dims.y;
        cluster.val.clusterDim.z = cluster_dims.z;
        cfg.attrs = &cluster;
        cfg.numAttrs = 1;
    }
    ClusterLaunch(const ClusterLaunch&) = delete;
    ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// How many clusters of `cluster_ctas` CTAs of `kernel` (`threads` threads, `smem` bytes of
// dynamic shared memory a CTA; the cluster along z) the current device runs at once:
// cudaOccupancyMaxActiveClusters, asked once per (device, kernel, size). 0 below sm_90. A size
// past the portable 8 is first allowed on the kernel (cudaFuncAttributeNonPortableClusterSizeAllowed).
int max_active_clusters(const void* kernel, int threads, int smem, int cluster_ctas);

// Launches kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent of the
// kernel before it on the stream when `dependent` is set and the kernel's code was built for
// sm_90 (ptx_version >= 90): the GPU may then start it before that kernel has finished, and
// the kernel's `griddepcontrol.wait` holds it until the other's writes are visible. Code
// built for older GPUs has no such wait, so it is launched plainly, as it is without `dependent`.
template <class... Params, class... Args>
void launch_maybe_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, bool dependent,
                            Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = stream;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = dependent && ptx_version(reinterpret_cast<const void*>(kernel)) >= 90 ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// The current device's SM count, for launchers whose kernel or grid depends on it. Read
// from the driver once per device (later calls are a lookup), like the opt-in above.
int current_sm_count();

// The most dynamic shared memory one CTA may ask for on the current device (opt-in limit,
// lowered by PA_SMEM_CAP_KIB), read once per device like the SM count.
int current_max_smem_optin();

}  // namespace pa
