// Shared-memory barriers for producer/consumer kernels (sm_80 and newer), the bulk copies that
// complete on them (sm_90), and the trigger of a programmatic dependent launch (sm_90).
//
// An mbarrier is a 64-bit counter in shared memory. It is initialised with the number of
// arrivals one phase expects; when that many threads have arrived, the phase completes
// and the barrier starts the next one. A waiter names the phase it waits for by its parity
// (0 for phases 0, 2, 4, ..., 1 for 1, 3, 5, ...), so a ring slot used for the n-th time
// waits with parity n % 2. An arrive releases the arriving thread's own earlier memory
// accesses, and a successful wait acquires them: every thread whose reads or writes must be
// ordered has to arrive itself (a warp-wide __syncwarp followed by one lane's arrive is
// not enough for the memory model).
//
// A named barrier (bar.sync id, n) is __syncthreads for a subset of the CTA: the first n
// threads to reach barrier `id` (whole warps) are released together. Barrier 0 is the one
// __syncthreads uses.
#pragma once

#include <cstdint>

#include "mma.cuh"  // smem_address

namespace pa {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}

// Spins until the phase with this parity has completed. sm_90 has try_wait, which lets
// the hardware suspend the thread for a while inside the instruction; sm_80-89 have only
// test_wait, which returns at once, so the loop polls. Both acquire the arrivals' writes.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        "  .reg .pred done;\n"
        "WAIT_%=:\n"
        "  mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "  @!done bra WAIT_%=;\n"
        "}\n" ::"r"(smem_address(bar)),
        "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n"
        "  .reg .pred done;\n"
        "WAIT_%=:\n"
        "  mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "  @!done bra WAIT_%=;\n"
        "}\n" ::"r"(smem_address(bar)),
        "r"(parity)
        : "memory");
#endif
}

// ---- sm_90: bulk copies that count their bytes on a barrier ----------------------------
// cp.async.bulk hands a contiguous global range to the copy engine (the TMA unit); when its
// bytes have landed in shared memory it subtracts them from the transaction count of an
// mbarrier. A phase completes once every expected arrival is in and the count is back at
// zero, so an arrival with expect_tx can come before the bytes it announces. The wrappers
// trap below sm_90: callers check the GPU (and the build) before they launch such a kernel.

// One arrival on `bar` that also announces `bytes` more to come from bulk copies.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
#else
    __trap();
#endif
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory by
// the copy engine, counted on `bar` as they land. A CTA launched without clusters is its own
// cluster of one, so its shared::cta addresses are shared::cluster addresses.
__device__ __forceinline__ void bulk_copy_to_shared(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_address(smem_dst)),
                 "l"(gmem_src), "r"(bytes), "r"(smem_address(bar))
                 : "memory");
#else
    __trap();
#endif
}

// The same copy with an L2 cache policy (l2_evict_first_policy) attached to its reads.
__device__ __forceinline__ void bulk_copy_to_shared(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar,
                                                    uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            smem_address(smem_dst)),
        "l"(gmem_src), "r"(bytes), "r"(smem_address(bar)), "l"(l2_policy)
        : "memory");
#else
    __trap();
#endif
}

// An L2 cache policy (sm_80+) for bytes a kernel reads once: the lines they fill are the
// first L2 evicts, so they do not push out lines that are read again. Pass it to a copy
// with a cache hint (.L2::cache_hint).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
    uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    return policy;
}

// Orders this thread's ordinary shared-memory writes before later bulk copies into the same
// bytes: the copy engine is another proxy, and barriers order threads, not proxies.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// A consumer thread is done with a ring slot: its arrival on the slot's `empty` barrier. When
// bulk copies refill the slot (BULK_COPIES), its reads and writes of the slot's bytes are the
// generic proxy's, the next copy into the slot is the copy engine's write, and the mbarrier
// orders threads, not proxies: so first a proxy fence. With cp.async (the generic proxy, as
// the thread's own accesses) the arrival alone does.
template <bool BULK_COPIES = true>
__device__ __forceinline__ void release_slot(uint64_t* empty) {
    if constexpr (BULK_COPIES) fence_proxy_async_shared();
    mbarrier_arrive(empty);
}

// Programmatic dependent launch (sm_90): this CTA no longer holds back the launch of the
// kernel queued behind it with cudaLaunchAttributeProgrammaticStreamSerialization. That
// kernel still waits (griddepcontrol.wait) for this grid to complete before it reads what
// this grid wrote. A no-op on older GPUs and without that attribute.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_sync() {
    static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "barriers 1..15, whole warps");
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(THREADS) : "memory");
}

// This warp's arrival on named barrier ID, without waiting for the others (they bar.sync).
template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_arrive() {
    static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "barriers 1..15, whole warps");
    asm volatile("bar.arrive %0, %1;" ::"n"(ID), "n"(THREADS) : "memory");
}

}  // namespace pa
