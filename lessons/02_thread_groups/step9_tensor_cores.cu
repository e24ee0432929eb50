// Lesson 02, step 9 (the grouped CTA on tensor cores): every instantiation, compiled once,
// and its launcher.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "step9_tensor_cores.cuh"
#include "steps.h"
#include "table.h"

namespace lesson02::step9 {

namespace {

// The query heads one CTA computes: the group rounded up to whole mma columns (8, 16 or
// 32); 0 for a group above 32.
int heads_per_cta(int group) { return group <= 8 ? 8 : group <= 16 ? 16 : group <= 32 ? 32 : 0; }

// What this step builds, listed once: {fp16, bf16} x D {64, 128, 256} x HEADS_PER_CTA
// {8, 16, 32}. Calls f(kernel, TypeTag<scalar_t>, dynamic shared memory in bytes) for the
// instantiation of (t, D, heads) and returns true, or returns false when that one is not built.
template <class F>
bool with_kernel(pa::DType t, int D, int heads, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<8, 16, 32>(heads, [&](auto n) {
                constexpr int kD = decltype(d)::value, kN = decltype(n)::value;
                f(grouped_mma_decode_kernel<T, kD, kN>, tag, MmaLayout<kD, kN>::kSmemBytes);
                return true;
            });
        });
    });
}

std::string not_built(pa::DType t, int D, int group) {
    return pa::strf("lesson02 step 9 (tensor cores): no kernel built for %s, D %d, group %d "
                    "(built: D 64/128/256, groups up to 32)",
                    pa::dtype_name(t), D, group);
}

}  // namespace

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const int group = s.group();
    if (group > 32)
        return pa::strf("group %d needs the per-head mapping (steps 1-2): one grouped CTA serves at most 32 query heads",
                        group);
    if (s.block_size < 1 || s.block_size > 32 || (s.block_size & (s.block_size - 1)) != 0)
        return pa::strf("block size %d: step 9 needs a power of two up to 32 (its tiles start on page boundaries)",
                        s.block_size);
    std::string reason;
    const bool built = with_kernel(s.dtype, s.D, heads_per_cta(group), [&](auto kernel, auto, int smem) {
        const int limit = pa::max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        if (smem > limit)
            reason = pa::strf("needs %d bytes of shared memory per CTA, more than the %d a CTA can have on %s", smem,
                              limit, info.name.c_str());
    });
    return built ? reason : not_built(s.dtype, s.D, group);
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const int group = a.H / a.Hkv;
    const bool built = with_kernel(a.dtype, a.D, heads_per_cta(group), [&](auto kernel, auto tag, int smem) {
        using T = typename decltype(tag)::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        const dim3 grid(a.Hkv, a.B);  // one CTA per (KV head, sequence)
        kernel<<<grid, kThreads, smem, stream>>>(
            static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
            static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, group, a.block_size,
            a.max_blocks_per_seq, a.scale);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(not_built(a.dtype, a.D, group));
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo&) {
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(s.Hkv) * s.B;
    g.threads = kThreads;
    const bool built = with_kernel(s.dtype, s.D, heads_per_cta(s.group()), [&](auto kernel, auto, int smem) {
        g.smem_bytes = smem;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), g.threads, g.smem_bytes);
    });
    if (!built) throw pa::CudaError(not_built(s.dtype, s.D, s.group()));
    return g;
}

}  // namespace lesson02::step9
