// Warp-level tensor-core helpers (sm_80+): ldmatrix from shared memory and
// mma.sync.m16n8k16 on fp16 or bf16 operands with fp32 accumulators.
//
// Fragment layouts of m16n8k16 (g = lane / 4, c = lane % 4; every register holds two
// 16-bit elements, the lower column in the low half):
//   A (16 x 16, row-major)  a0: row g,   cols 2c..2c+1     a1: row g+8, cols 2c..2c+1
//                           a2: row g,   cols 2c+8..2c+9   a3: row g+8, cols 2c+8..2c+9
//   B (16 x 8, "col": stored as 8 rows of 16, one per n)   b0: n g, k 2c..2c+1   b1: n g, k 2c+8..2c+9
//   C (16 x 8, fp32)        c0, c1: row g, cols 2c, 2c+1   c2, c3: row g+8, cols 2c, 2c+1
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace pa {

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements. Lane l passes the address of row l % 8 of matrix
// l / 8 (16 contiguous bytes, 16-byte aligned); register i receives matrix i, lane l
// holding row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row))
                 : "memory");
}

// The same, each matrix transposed on the way: lane l receives column l / 4, rows
// 2 (l % 4) and 2 (l % 4) + 1 of the stored matrix.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row))
                 : "memory");
}

// Two 8x8 matrices: lanes 0-15 pass the row addresses (the other lanes' are ignored).
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_address(row))
                 : "memory");
}

// c += a * b for one 16x8x16 block.
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats rounded to 16 bits and packed as one operand register (lo in the low half).
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace pa
