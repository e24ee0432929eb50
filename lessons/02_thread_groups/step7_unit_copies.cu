// Step 7's instantiations, listed once (with_kernel), and its launcher. The layout (heads per
// CTA, CTAs per SM, the grid) is step 5's: the same MmaLayout, the same rule.
#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "step7_unit_copies.cuh"
#include "steps.h"
#include "table.h"

namespace lesson02::step7 {

namespace {

// Every instantiation: dtype x D {64, 128, 256} x heads per CTA {8, 16, 32} x CTAs per SM,
// two per SM only for one 8-head column block, as in step 5. Calls f(kernel, smem bytes) and
// returns true, or returns false when the combination was not built.
template <class F>
bool with_kernel(pa::DType t, int D, int heads, int ctas_per_sm, F&& f) {
    if (ctas_per_sm == 2 && heads != 8) return false;
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<8, 16, 32>(heads, [&](auto n) {
                return pa::dispatch_int<1, 2>(ctas_per_sm, [&](auto c) {
                    if constexpr (c.value == 2 && n.value != 8) {
                        return false;
                    } else {
                        f(grouped_unit_decode_kernel<T, d.value, n.value, c.value>,
                          MmaLayout<d.value, n.value, c.value>::kSmemBytes);
                        return true;
                    }
                });
            });
        });
    });
}

}  // namespace

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = step6::why_not(s, info);
    if (!why.empty()) return why;
    const int unit_rows = tile_tokens(s.D) / 8;
    if (s.block_size < unit_rows)
        return pa::strf("copies %d-token units of a page, and pages of %d tokens are smaller (step 6 runs them)", unit_rows,
                        s.block_size);
    int ptx = 0;
    with_kernel(s.dtype, s.D, step5::heads_per_cta(s.group()), step5::ctas_per_sm(s),
                [&](auto kernel, int) { ptx = pa::ptx_version(reinterpret_cast<const void*>(kernel)); });
    if (ptx < 90)
        return pa::strf("this build has no sm_90 code for it (compute_%d; build with CMAKE_CUDA_ARCHITECTURES 90a)", ptx);
    return "";
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const pa::DecodeShape s = pa::launch_shape(a);
    if (a.block_size < tile_tokens(a.D) / 8)
        throw pa::CudaError(pa::strf("lesson02 step 7: pages of %d tokens are smaller than its %d-token units", a.block_size,
                                     tile_tokens(a.D) / 8));
    const int heads = step5::heads_per_cta(a.H / a.Hkv);
    const bool built = with_kernel(a.dtype, a.D, heads, step5::ctas_per_sm(s), [&](auto kernel, int smem) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<dim3(a.Hkv, a.B), kMmaThreads, smem, stream>>>(
            static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
            static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
            a.max_blocks_per_seq, a.scale);
        CUDA_CHECK_LAUNCH();
    });
    if (!built)
        throw pa::CudaError(pa::strf("lesson02 step 7: no kernel built for %s D %d with %d heads per CTA, %d per SM",
                                     pa::dtype_name(a.dtype), a.D, heads, step5::ctas_per_sm(s)));
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo&) {
    pa::LaunchGeometry g;
    with_kernel(s.dtype, s.D, step5::heads_per_cta(s.group()), step5::ctas_per_sm(s), [&](auto kernel, int smem) {
        const void* k = reinterpret_cast<const void*>(kernel);
        pa::opt_in_max_dynamic_smem(k);
        g.ctas = static_cast<long long>(s.Hkv) * s.B;
        g.threads = kMmaThreads;
        g.smem_bytes = smem;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g.ctas_per_sm, k, g.threads, g.smem_bytes));
    });
    return g;
}

}  // namespace lesson02::step7
