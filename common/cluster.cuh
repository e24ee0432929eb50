// Thread-block clusters (sm_90): the cluster's barrier, a CTA's rank in its cluster, and loads
// from another CTA's shared memory (distributed shared memory). Lesson 03's step 8 and lesson
// 05's step 12 merge a cluster's partitions with them. The barrier's .aligned forms want every
// thread of a warp to execute them together. Code built for GPUs without clusters never
// launches the kernels that call these: there the bodies trap.
#pragma once

#include <cuda_runtime.h>

#include "mma.cuh"  // smem_address

namespace pa {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kArchHasClusters = true;
#else
constexpr bool kArchHasClusters = false;
#endif

// This thread's arrival at the cluster's barrier; its shared-memory writes before it are
// released to the cluster. The barrier waits only for threads that have not exited.
__device__ __forceinline__ void cluster_arrive_release() {
    if constexpr (kArchHasClusters) asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    else __trap();
}

// Waits until every non-exited thread of the cluster has arrived; their writes are acquired.
__device__ __forceinline__ void cluster_wait_acquire() {
    if constexpr (kArchHasClusters) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    else __trap();
}

// Both: the cluster's barrier as one call.
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive_release();
    cluster_wait_acquire();
}

// This CTA's rank in its cluster (0 for a kernel launched without clusters).
__device__ __forceinline__ int cluster_rank() {
    unsigned r = 0;
    if constexpr (kArchHasClusters) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    else __trap();
    return static_cast<int>(r);
}

// Where `local` (this CTA's shared memory) lies in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ unsigned cluster_address(const void* local, int rank) {
    unsigned remote = 0;
    if constexpr (kArchHasClusters)
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_address(local)), "r"(rank));
    else
        __trap();
    return remote;
}

// The float4 (or float) at `local`'s place in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ float4 load_shared_cluster(const float4* local, int rank) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (kArchHasClusters)
        asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(cluster_address(local, rank))
                     : "memory");
    else
        __trap();
    return v;
}

__device__ __forceinline__ float load_shared_cluster(const float* local, int rank) {
    float v = 0.f;
    if constexpr (kArchHasClusters)
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_address(local, rank)) : "memory");
    else
        __trap();
    return v;
}

}  // namespace pa
