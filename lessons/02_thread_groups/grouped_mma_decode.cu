// Every instantiation of the tensor-core grouped kernel, in its own translation unit so the
// two kernel files compile in parallel. The launcher is in thread_group_decode.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "grouped_mma_decode.cuh"
#include "thread_group_decode.h"

namespace lesson02 {

namespace {

// Two CTAs per SM only for one 8-head column block: with 16 or 32 heads the logits and q
// leave too little shared memory for two rings.
template <class T, int D, bool TIMELINE>
const void* for_group(int group_n, int ctas_per_sm) {
    if (ctas_per_sm == 2)
        return group_n == 8 ? reinterpret_cast<const void*>(grouped_mma_decode_kernel<T, D, 8, 2, TIMELINE>) : nullptr;
    switch (group_n) {
        case 8: return reinterpret_cast<const void*>(grouped_mma_decode_kernel<T, D, 8, 1, TIMELINE>);
        case 16: return reinterpret_cast<const void*>(grouped_mma_decode_kernel<T, D, 16, 1, TIMELINE>);
        case 32: return reinterpret_cast<const void*>(grouped_mma_decode_kernel<T, D, 32, 1, TIMELINE>);
        default: return nullptr;
    }
}

template <class T>
const void* for_head_size(int head_size, int group_n, int ctas_per_sm) {
    switch (head_size) {
        case 64: return for_group<T, 64, false>(group_n, ctas_per_sm);
        case 128: return for_group<T, 128, false>(group_n, ctas_per_sm);
        case 256: return for_group<T, 256, false>(group_n, ctas_per_sm);
        default: return nullptr;
    }
}

template <int D>
int smem_for_group(int group_n, int ctas_per_sm) {
    if (ctas_per_sm == 2) return group_n == 8 ? MmaLayout<D, 8, 2>::kSmemBytes : 0;
    switch (group_n) {
        case 8: return MmaLayout<D, 8, 1>::kSmemBytes;
        case 16: return MmaLayout<D, 16, 1>::kSmemBytes;
        case 32: return MmaLayout<D, 32, 1>::kSmemBytes;
        default: return 0;
    }
}

}  // namespace

const void* grouped_mma_kernel(pa::DType t, int head_size, int group_n, int ctas_per_sm) {
    return t == pa::DType::fp16 ? for_head_size<__half>(head_size, group_n, ctas_per_sm)
                                : for_head_size<__nv_bfloat16>(head_size, group_n, ctas_per_sm);
}

// The timeline build exists for D 128 only (every Table A and Table C shape), to keep the
// compile short.
const void* grouped_mma_timeline_kernel(pa::DType t, int head_size, int group_n, int ctas_per_sm) {
    if (head_size != 128) return nullptr;
    return t == pa::DType::fp16 ? for_group<__half, 128, true>(group_n, ctas_per_sm)
                                : for_group<__nv_bfloat16, 128, true>(group_n, ctas_per_sm);
}

size_t grouped_mma_smem_bytes(int head_size, int group_n, int ctas_per_sm) {
    switch (head_size) {
        case 64: return smem_for_group<64>(group_n, ctas_per_sm);
        case 128: return smem_for_group<128>(group_n, ctas_per_sm);
        case 256: return smem_for_group<256>(group_n, ctas_per_sm);
        default: return 0;
    }
}

int grouped_mma_threads() { return kMmaThreads; }

}  // namespace lesson02
