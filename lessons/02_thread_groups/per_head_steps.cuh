// The host side steps 1 and 2 share (they differ only in their kernel): one CTA per
// (query head, sequence), 128 threads, the whole context's logits in shared memory as in
// lesson 01. Included by step1_thread_groups.cu and step2_wide_loads.cu, each of which
// names its kernel through a Kernels struct:
//   struct Kernels {
//       static constexpr const char* kStep = "step 1 (thread groups)";
//       static constexpr int kThreads = step1::kThreads;
//       static size_t smem_bytes(int D, int max_ctx) { return step1::smem_bytes(D, max_ctx); }
//       template <class T, int D, int TGS> static auto get() { return thread_groups_decode_kernel<T, D, TGS>; }
//   };
#pragma once

#include <string>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "steps.h"
#include "table.h"

namespace lesson02::per_head_steps {

// What a step builds, listed once: {fp16, bf16} x D {64, 128, 256} x TGS {4, 8, 16}.
// Calls f(kernel, TypeTag<scalar_t>) and returns true, or returns false when not built.
template <class Kernels, class F>
bool with_kernel(pa::DType t, int D, int tgs, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<4, 8, 16>(tgs, [&](auto g) {
                f(Kernels::template get<T, decltype(d)::value, decltype(g)::value>(), tag);
                return true;
            });
        });
    });
}

template <class Kernels>
std::string not_built(pa::DType t, int D, int tgs) {
    return pa::strf("lesson02 %s: no kernel built for %s, D %d, TGS %d (built: D 64/128/256, TGS 4/8/16)",
                    Kernels::kStep, pa::dtype_name(t), D, tgs);
}

template <class Kernels>
std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info) {
    const void* kernel = nullptr;
    with_kernel<Kernels>(s.dtype, s.D, tgs, [&](auto k, auto) { kernel = reinterpret_cast<const void*>(k); });
    if (!kernel) return not_built<Kernels>(s.dtype, s.D, tgs);
    const size_t need = Kernels::smem_bytes(s.D, s.max_ctx());
    const int limit = pa::max_dynamic_smem(kernel);
    if (need > static_cast<size_t>(limit))
        return pa::strf("ctx %d needs %zu bytes of shared memory for its logits, more than the %d a CTA can have on %s; "
                        "lesson 03 (split-k) handles long contexts",
                        s.max_ctx(), need, limit, info.name.c_str());
    return "";
}

template <class Kernels>
void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream) {
    const bool built = with_kernel<Kernels>(a.dtype, a.D, tgs, [&](auto kernel, auto tag) {
        using T = typename decltype(tag)::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        const dim3 grid(a.H, a.B);  // one CTA per (query head, sequence)
        kernel<<<grid, Kernels::kThreads, Kernels::smem_bytes(a.D, a.max_ctx), stream>>>(
            static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
            static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv, a.block_size,
            a.max_blocks_per_seq, a.scale);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(a.dtype, a.D, tgs));
}

template <class Kernels>
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs) {
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(s.H) * s.B;
    g.threads = Kernels::kThreads;
    g.smem_bytes = static_cast<int>(Kernels::smem_bytes(s.D, s.max_ctx()));
    const bool built = with_kernel<Kernels>(s.dtype, s.D, tgs, [&](auto kernel, auto) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), g.threads, g.smem_bytes);
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(s.dtype, s.D, tgs));
    return g;
}

}  // namespace lesson02::per_head_steps
