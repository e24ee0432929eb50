// The host side steps 3, 4 and 5 share (they differ in their kernel and its shared memory):
// one CTA of 128 threads per (sequence, KV head), serving the group rounded up to 1, 2, 4, 8
// or 32 query heads; built at TGS 8 only (step 6 sweeps the TGS). Included by
// step3_grouped_logits.cu, step4_online_softmax.cu and step5_cp_async_ring.cu, each of which
// names its kernel through a Kernels struct:
//   struct Kernels {
//       static constexpr const char* kStep = "step 4 (online softmax)";
//       static constexpr int kThreads = step4::kThreads;
//       static int last_arg(int heads, int max_ctx);             // the kernel's last argument
//       static size_t smem_bytes(int D, int heads, int max_ctx);  // dynamic shared memory
//       static std::string too_big(const pa::DecodeShape& s, size_t need, int limit, const pa::DeviceInfo& info);
//       template <class T, int D, int TGS, int HEADS> static auto get();
//   };
#pragma once

#include <algorithm>
#include <string>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "grouped_common.cuh"  // kChunkAlign
#include "launch_utils.cuh"
#include "steps.h"
#include "table.h"

namespace lesson02::grouped_steps {

// The group rounded up to 1, 2, 4, 8 or 32 (a group of 6 runs as 8 with two heads idle); 0
// for a group above 32.
inline int heads_per_cta(int group) {
    for (int g : {1, 2, 4, 8, 32})
        if (group <= g) return g;
    return 0;
}

// Steps 4 and 5: tokens per softmax chunk, so that one chunk's logits of every head take at
// most 32 KiB; a multiple of 32 tokens (chunks start on a page boundary).
inline int chunk_tokens(int heads, int max_ctx) {
    constexpr int kLogitBudgetBytes = 32 * 1024;
    const int budget = kLogitBudgetBytes / (4 * heads) / kChunkAlign * kChunkAlign;
    const int whole = (max_ctx + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    return std::max(kChunkAlign, std::min(budget, whole));
}

// What a step builds, listed once: {fp16, bf16} x D {64, 128, 256} x TGS 8 x heads {1, 2, 4,
// 8, 32}. Calls f(kernel, TypeTag<scalar_t>) and returns true, or returns false when not built.
template <class Kernels, class F>
bool with_kernel(pa::DType t, int D, int tgs, int heads, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<8>(tgs, [&](auto g) {
                return pa::dispatch_int<1, 2, 4, 8, 32>(heads, [&](auto n) {
                    f(Kernels::template get<T, decltype(d)::value, decltype(g)::value, decltype(n)::value>(), tag);
                    return true;
                });
            });
        });
    });
}

template <class Kernels>
std::string not_built(pa::DType t, int D, int tgs, int heads) {
    return pa::strf("lesson02 %s: no kernel built for %s, D %d, TGS %d, %d heads per CTA (built: D 64/128/256, TGS 8)",
                    Kernels::kStep, pa::dtype_name(t), D, tgs, heads);
}

template <class Kernels>
std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info) {
    const int heads = heads_per_cta(s.group());
    if (heads == 0)
        return pa::strf("the grouped CTA serves at most 32 query heads; group %d needs the per-head mapping", s.group());
    const void* kernel = nullptr;
    with_kernel<Kernels>(s.dtype, s.D, tgs, heads, [&](auto k, auto) { kernel = reinterpret_cast<const void*>(k); });
    if (!kernel) return not_built<Kernels>(s.dtype, s.D, tgs, heads);
    const size_t need = Kernels::smem_bytes(s.D, heads, s.max_ctx());
    const int limit = pa::max_dynamic_smem(kernel);
    return need > static_cast<size_t>(limit) ? Kernels::too_big(s, need, limit, info) : "";
}

template <class Kernels>
void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream) {
    const int heads = heads_per_cta(a.H / a.Hkv);
    const bool built = with_kernel<Kernels>(a.dtype, a.D, tgs, heads, [&](auto kernel, auto tag) {
        using T = typename decltype(tag)::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        const dim3 grid(a.Hkv, a.B);  // one CTA per (KV head, sequence)
        kernel<<<grid, Kernels::kThreads, Kernels::smem_bytes(a.D, heads, a.max_ctx), stream>>>(
            static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
            static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
            a.max_blocks_per_seq, a.scale, Kernels::last_arg(heads, a.max_ctx));
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(a.dtype, a.D, tgs, heads));
}

template <class Kernels>
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs) {
    const int heads = heads_per_cta(s.group());
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(s.Hkv) * s.B;
    g.threads = Kernels::kThreads;
    g.smem_bytes = static_cast<int>(Kernels::smem_bytes(s.D, heads, s.max_ctx()));
    const bool built = with_kernel<Kernels>(s.dtype, s.D, tgs, heads, [&](auto kernel, auto) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), g.threads, g.smem_bytes);
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(s.dtype, s.D, tgs, heads));
    return g;
}

}  // namespace lesson02::grouped_steps
