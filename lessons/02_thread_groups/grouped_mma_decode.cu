// Every instantiation of the tensor-core grouped kernel, in its own translation unit so the
// two kernel files compile in parallel. The launcher is in thread_group_decode.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "grouped_mma_decode.cuh"
#include "thread_group_decode.h"

namespace lesson02 {

namespace {

template <class T, int D>
const void* for_group(int group_n) {
    switch (group_n) {
        case 8: return reinterpret_cast<const void*>(grouped_mma_decode_kernel<T, D, 8>);
        case 16: return reinterpret_cast<const void*>(grouped_mma_decode_kernel<T, D, 16>);
        case 32: return reinterpret_cast<const void*>(grouped_mma_decode_kernel<T, D, 32>);
        default: return nullptr;
    }
}

template <class T>
const void* for_head_size(int head_size, int group_n) {
    switch (head_size) {
        case 64: return for_group<T, 64>(group_n);
        case 128: return for_group<T, 128>(group_n);
        case 256: return for_group<T, 256>(group_n);
        default: return nullptr;
    }
}

}  // namespace

const void* grouped_mma_kernel(pa::DType t, int head_size, int group_n) {
    return t == pa::DType::fp16 ? for_head_size<__half>(head_size, group_n) : for_head_size<__nv_bfloat16>(head_size, group_n);
}

namespace {
template <int D>
int smem_for_group(int group_n) {
    switch (group_n) {
        case 8: return MmaLayout<D, 8>::kSmemBytes;
        case 16: return MmaLayout<D, 16>::kSmemBytes;
        case 32: return MmaLayout<D, 32>::kSmemBytes;
        default: return 0;
    }
}
}  // namespace

size_t grouped_mma_smem_bytes(int head_size, int group_n) {
    switch (head_size) {
        case 64: return smem_for_group<64>(group_n);
        case 128: return smem_for_group<128>(group_n);
        case 256: return smem_for_group<256>(group_n);
        default: return 0;
    }
}

int grouped_mma_threads() { return kMmaThreads; }

}  // namespace lesson02
