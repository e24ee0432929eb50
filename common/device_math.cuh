// Device helpers the decode lessons share: fp16/bf16 <-> float, wide loads, warp reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace pa {

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two 16-bit elements packed in one 32-bit word -> two floats.
__device__ __forceinline__ void unpack2(uint32_t w, __half, float& lo, float& hi) {
    const __half2 h = *reinterpret_cast<const __half2*>(&w);
    const float2 f = __half22float2(h);
    lo = f.x;
    hi = f.y;
}
__device__ __forceinline__ void unpack2(uint32_t w, __nv_bfloat16, float& lo, float& hi) {
    // bf16 is the top half of a float: a shift is the whole conversion
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}

// One 16-byte load of 8 elements (p must be 16-byte aligned) -> 8 floats.
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&f)[8]) {
    const uint4 w = *reinterpret_cast<const uint4*>(p);
    unpack2(w.x, T{}, f[0], f[1]);
    unpack2(w.y, T{}, f[2], f[3]);
    unpack2(w.z, T{}, f[4], f[5]);
    unpack2(w.w, T{}, f[6], f[7]);
}

// One 8-byte load of 4 elements (p must be 8-byte aligned) -> 4 floats.
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&f)[4]) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    unpack2(w.x, T{}, f[0], f[1]);
    unpack2(w.y, T{}, f[2], f[3]);
}

// One 4-byte load of 2 elements (p must be 4-byte aligned) -> 2 floats.
template <class T>
__device__ __forceinline__ void load2(const T* p, float& a, float& b) {
    unpack2(*reinterpret_cast<const uint32_t*>(p), T{}, a, b);
}

// 8 floats -> 8 elements in one 16-byte store (p must be 16-byte aligned).
template <class T>
__device__ __forceinline__ void store8(T* p, const float (&f)[8]) {
    alignas(16) T h[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = from_float<T>(f[i]);
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(h);
}

// cp.async (sm_80+): a 16-byte copy global -> shared that holds no register while in
// flight, so a CTA can keep tens of kilobytes of loads outstanding. Copies issued between
// two commits form a group; wait<N> returns once at most N groups are still in flight.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// The GPU's nanosecond clock (%globaltimer), the same on every SM, and the SM this thread
// runs on: what a kernel records to show when its CTAs did what, and where.
__device__ __forceinline__ uint64_t globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned sm_id() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

}  // namespace pa
