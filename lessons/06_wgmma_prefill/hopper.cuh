// Hopper (sm_90a) building blocks of lesson 06's steps 3 to 9: wgmma, its shared-memory
// matrix descriptors and fences, the bulk tensor copy (TMA), and register reallocation.
// Compiled only into the 90a objects (SM90A_SOURCES): a plain sm_90 or older build never sees
// these instructions.
//
// wgmma.mma_async: one warpgroup (4 consecutive warps, the first a multiple of 4) computes
// D[64 x N] (+)= A[64 x 16] B[16 x N] asynchronously on the tensor cores. B is always read from
// shared memory through a 64-bit descriptor; A from shared memory (a descriptor) or from
// registers (the same fragment layout as mma.sync's A, warp w holding rows 16w .. 16w + 15).
// The accumulator fragment of m64nN: warp w, lane l, register r hold
//   row 16w + l / 4 + 8 * ((r >> 1) & 1),  column 8 * (r >> 2) + 2 * (l % 4) + (r & 1)
// i.e. per 8-column block the same four registers as mma.sync.m16n8k16 (policies.cuh).
//
// Ordering rules (PTX ISA, "asynchronous warpgroup level matrix operations"):
//  * wgmma.fence before the first wgmma of a batch, and again after registers it reads or
//    accumulates into were touched by ordinary instructions;
//  * shared memory written by ordinary stores (st.shared, cp.async) is read by wgmma through
//    the async proxy: each writing thread executes fence.proxy.async.shared::cta before the
//    barrier that precedes the wgmma. Without it the tensor cores may read stale bytes;
//  * commit_group closes a batch, wait_group<N> waits until at most N batches are pending.
//    Registers of a pending batch (accumulators, A fragments) must not be read or written.
#pragma once

#include <cuda.h>  // CUtensorMap (a 128-byte opaque struct); no driver library is linked
#include <cuda_runtime.h>

#include <cstdint>

#include "mma.cuh"  // pa::smem_address

namespace lesson06::sm90 {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Keeps the compiler from moving reads or writes of accumulator / fragment registers across a
// wgmma fence, commit or wait: the asm statements that read and write them are otherwise
// unrelated to the wait as far as the compiler knows.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Shared-memory matrix descriptor (64 bits):
//   bits  0-13  start address >> 4 (of the first core matrix; 18 address bits)
//   bits 16-29  leading-dimension byte offset >> 4 (LBO)
//   bits 32-45  stride-dimension byte offset >> 4 (SBO)
//   bits 49-51  base offset (0: every swizzled tile here starts on a 1024-byte boundary)
//   bits 62-63  swizzle: 0 none, 1 = 128 B, 2 = 64 B, 3 = 32 B
enum class Swizzle : uint64_t { none = 0, b128 = 1 };
__device__ __forceinline__ uint64_t make_smem_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes, Swizzle sw) {
    const uint32_t addr = pa::smem_address(smem);
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16 |
           static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32 | static_cast<uint64_t>(sw) << 62;
}

// D[64 x 128] (+)= A[64 x 16] B[16 x 128], bf16 in, fp32 accumulate, A and B from shared
// memory, both K-major (no transpose): scores S = Q K^T with Q [row][d] and K [key][d].
// accumulate = 0 overwrites D (the first k-step of a product).
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// D[64 x 128] += A[64 x 16] B[16 x 128] with A in registers (4 x bf16x2 per thread, mma.sync's A
// layout) and B from shared memory, MN-major (TRANS_B = 1, imm-trans-b: O += P V with V [key][d], d
// contiguous) or K-major (TRANS_B = 0: S = Q K^T with K [key][d]). The scale-d operand is a
// predicate (no immediate), hence the setp, as above.
template <int TRANS_B>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                    int accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
}
__device__ __forceinline__ void wgmma_m64n128k16_rs_transb(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                           int accumulate) {
    wgmma_m64n128k16_rs<1>(d, a, desc_b, accumulate);
}

// ---- Bulk tensor copies (TMA) and the barriers they complete on ----------------------------
//
// cp.async.bulk.tensor copies a box of a tensor, described by a tensor map (CUtensorMap, made on
// the host with cuTensorMapEncodeTiled and passed as a __grid_constant__ kernel parameter), from
// global to shared memory. One thread issues it; the copy engine does the rest, applying the
// map's swizzle on the way and zero-filling what lies outside the tensor. When its bytes have
// landed it decrements the transaction count of an mbarrier: a consumer waits on the barrier's
// phase, which completes once the expected arrivals have arrived and the expected bytes
// (announced with expect_tx) have come.

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(pa::smem_address(bar)), "r"(arrivals) : "memory");
}
// Makes initialised barriers visible to the copy engine (the async proxy) and the other threads.
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// Arrives and announces `bytes` more bytes the phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(pa::smem_address(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(pa::smem_address(bar)) : "memory");
}
// Waits until the phase of this parity has completed (try_wait suspends the thread inside the
// instruction for a while instead of spinning flat out).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(pa::smem_address(bar)),
        "r"(parity)
        : "memory");
}

// Box at coordinates (c0 innermost, ...) of a 3-D / 4-D tensor map into shared memory.
__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::
            "r"(pa::smem_address(smem_dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(pa::smem_address(bar))
        : "memory");
}
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];" ::"r"(pa::smem_address(smem_dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(pa::smem_address(bar))
        : "memory");
}
__device__ __forceinline__ void tma_load_5d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3, int c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
        "[%7];" ::"r"(pa::smem_address(smem_dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(pa::smem_address(bar))
        : "memory");
}

// ---- The output through shared memory (step 18) ------------------------------------------------
// Four 8x8 matrices of 16-bit elements into shared memory: lane l gives the address of row l % 8
// of matrix l / 8, and register m of every lane holds that lane's two elements of matrix m in the
// mma accumulator layout (row l / 4, columns 2 (l % 4) and + 1).
__device__ __forceinline__ void stmatrix_x4(void* row_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(pa::smem_address(row_addr)),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

// A box of shared memory to the tensor at coordinates (c0 innermost, c1, c2), by the copy engine;
// completion is tracked per thread, in bulk groups.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* smem_src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(pa::smem_address(smem_src))
                 : "memory");
}
// Closes this thread's bulk group of stores issued so far.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// This thread's bulk groups have finished reading shared memory (the writes may still be on their way).
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// ... and are complete.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// ---- Register reallocation and named barriers -----------------------------------------------
//
// setmaxnreg moves registers between the warpgroups of a CTA: a producer warpgroup that only
// issues copies gives most of its registers back, consumer warpgroups take them. It needs a
// register cap at kernel entry (__launch_bounds__(threads, 1)), and every warp of a warpgroup
// must execute the same setmaxnreg.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

// bar.sync waits until `threads` threads (whole warps) have reached barrier `id`; bar.arrive
// counts the calling warps toward it without waiting. Barrier 0 is __syncthreads'.
template <int ID, int THREADS>
__device__ __forceinline__ void named_bar_sync() {
    static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "barriers 1..15, whole warps");
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(THREADS) : "memory");
}
template <int ID, int THREADS>
__device__ __forceinline__ void named_bar_arrive() {
    static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "barriers 1..15, whole warps");
    asm volatile("bar.arrive %0, %1;" ::"n"(ID), "n"(THREADS) : "memory");
}

}  // namespace lesson06::sm90
