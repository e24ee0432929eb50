// Every instantiation of lesson 01's kernel, compiled once.
#include "naive_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "naive_decode.cuh"
#include "table.h"

namespace lesson01 {

// The logits are padded to a multiple of 4 floats: the compiler may read the loop's tail
// with one 16-byte shared load, which must stay inside the allocation.
size_t smem_bytes(int D, int max_ctx) { return sizeof(float) * (static_cast<size_t>(D) + (max_ctx + 3) / 4 * 4); }

namespace {

// Every instantiation, listed once: dtype x D {64, 128, 256}. Calls f(kernel) and returns
// true, or returns false for a D that was not built.
template <class F>
bool with_kernel(pa::DType t, int D, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            f(naive_paged_decode_kernel<T, d.value>);
            return true;
        });
    });
}

[[noreturn]] void not_built(pa::DType t, int D) {
    throw pa::CudaError(pa::strf("lesson01: no kernel built for %s with head size %d", pa::dtype_name(t), D));
}

}  // namespace

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const size_t need = smem_bytes(s.D, s.max_ctx());
    int limit = 0;
    if (!with_kernel(s.dtype, s.D, [&](auto kernel) { limit = pa::max_dynamic_smem(reinterpret_cast<const void*>(kernel)); }))
        return pa::strf("no kernel built for head size %d", s.D);
    if (need > static_cast<size_t>(limit))
        return pa::strf("ctx %d needs %zu bytes of shared memory for its logits, more than the %d a CTA can have on %s; "
                        "lesson 03 (split-k) handles long contexts",
                        s.max_ctx(), need, limit, info.name.c_str());
    return "";
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const bool built = with_kernel(a.dtype, a.D, [&](auto kernel) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        const dim3 grid(a.H, a.B);
        kernel<<<grid, kThreads, smem_bytes(a.D, a.max_ctx), stream>>>(
            static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
            static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv, a.block_size,
            a.max_blocks_per_seq, a.scale);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) not_built(a.dtype, a.D);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo&) {
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(s.H) * s.B;
    g.threads = kThreads;
    g.smem_bytes = static_cast<int>(smem_bytes(s.D, s.max_ctx()));
    const bool built = with_kernel(s.dtype, s.D, [&](auto kernel) {
        const void* k = reinterpret_cast<const void*>(kernel);
        pa::opt_in_max_dynamic_smem(k);
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(k), g.threads, g.smem_bytes);
    });
    if (!built) not_built(s.dtype, s.D);
    return g;
}

pa::DecodeVariant variant() {
    pa::DecodeVariant v;
    v.name = "naive";
    v.why_not = why_not;
    v.launch = launch;
    v.geometry = geometry;
    return v;
}

}  // namespace lesson01
