// Every instantiation of lesson 01's kernel, compiled once.
#include "naive_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.cuh"
#include "launch_utils.cuh"
#include "naive_decode.cuh"
#include "table.h"

namespace lesson01 {

// The logits are padded to a multiple of 4 floats: the compiler may read the loop's tail
// with one 16-byte shared load, which must stay inside the allocation.
size_t smem_bytes(int D, int max_ctx) { return sizeof(float) * (static_cast<size_t>(D) + (max_ctx + 3) / 4 * 4); }

namespace {

const void* kernel_address(pa::DType t, int D);

}  // namespace

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const size_t need = smem_bytes(s.D, s.max_ctx());
    const int limit = pa::max_dynamic_smem(kernel_address(s.dtype, s.D));
    if (need > static_cast<size_t>(limit))
        return pa::strf("ctx %d needs %zu bytes of shared memory for its logits, more than the %d a CTA can have on %s; "
                        "lesson 03 (split-k) handles long contexts",
                        s.max_ctx(), need, limit, info.name.c_str());
    return "";
}

namespace {

template <class scalar_t, int D>
void launch_typed(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    auto kernel = naive_paged_decode_kernel<scalar_t, D>;
    const size_t smem = smem_bytes(D, a.max_ctx);
    pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
    const dim3 grid(a.H, a.B);
    kernel<<<grid, kThreads, smem, stream>>>(static_cast<scalar_t*>(a.out), static_cast<const scalar_t*>(a.q),
                                             static_cast<const scalar_t*>(a.k_cache), static_cast<const scalar_t*>(a.v_cache),
                                             a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv, a.block_size,
                                             a.max_blocks_per_seq, a.scale);
    CUDA_CHECK_LAUNCH();
}

template <class scalar_t>
void launch_dtype(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    switch (a.D) {
        case 64: return launch_typed<scalar_t, 64>(a, stream);
        case 128: return launch_typed<scalar_t, 128>(a, stream);
        case 256: return launch_typed<scalar_t, 256>(a, stream);
        default: throw pa::CudaError("lesson01: unsupported head size " + std::to_string(a.D));
    }
}

const void* kernel_address(pa::DType t, int D) {
    if (t == pa::DType::fp16) {
        if (D == 64) return reinterpret_cast<const void*>(naive_paged_decode_kernel<__half, 64>);
        if (D == 128) return reinterpret_cast<const void*>(naive_paged_decode_kernel<__half, 128>);
        return reinterpret_cast<const void*>(naive_paged_decode_kernel<__half, 256>);
    }
    if (D == 64) return reinterpret_cast<const void*>(naive_paged_decode_kernel<__nv_bfloat16, 64>);
    if (D == 128) return reinterpret_cast<const void*>(naive_paged_decode_kernel<__nv_bfloat16, 128>);
    return reinterpret_cast<const void*>(naive_paged_decode_kernel<__nv_bfloat16, 256>);
}

}  // namespace

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    if (a.dtype == pa::DType::fp16) launch_dtype<__half>(a, stream);
    else launch_dtype<__nv_bfloat16>(a, stream);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo&) {
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(s.H) * s.B;
    g.threads = kThreads;
    g.smem_bytes = static_cast<int>(smem_bytes(s.D, s.max_ctx()));
    const void* k = kernel_address(s.dtype, s.D);
    pa::opt_in_max_dynamic_smem(k);
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g.ctas_per_sm, k, g.threads, g.smem_bytes));
    return g;
}

pa::DecodeVariant variant() {
    return {"naive", why_not, launch, geometry};
}

}  // namespace lesson01
