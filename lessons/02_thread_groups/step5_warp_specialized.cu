// Step 5's instantiations, listed once (with_kernel), and its launchers: the measured
// kernel and its timeline build.
#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "step5_warp_specialized.cuh"
#include "steps.h"
#include "table.h"

namespace lesson02::step5 {

namespace {

// Every instantiation: dtype x D {64, 128, 256} x heads per CTA {8, 16, 32} x CTAs per SM,
// with two per SM only for one 8-head column block (with 16 or 32 heads the logits and q
// leave too little shared memory for two rings); the timeline build for D 128 only (every
// Table A and Table C shape), to keep the compile short. Calls f(kernel, smem bytes) and
// returns true, or returns false when the combination was not built.
template <bool TIMELINE, class F>
bool with_kernel(pa::DType t, int D, int heads, int ctas_per_sm, F&& f) {
    if (TIMELINE && D != 128) return false;
    if (ctas_per_sm == 2 && heads != 8) return false;
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<8, 16, 32>(heads, [&](auto n) {
                return pa::dispatch_int<1, 2>(ctas_per_sm, [&](auto c) {
                    if constexpr (c.value == 2 && n.value != 8) {
                        return false;
                    } else {
                        f(grouped_mma_decode_kernel<T, d.value, n.value, c.value, TIMELINE>,
                          MmaLayout<d.value, n.value, c.value>::kSmemBytes);
                        return true;
                    }
                });
            });
        });
    });
}

// Two CTAs per SM (3-slot rings) when one 8-head column block serves a grid larger than
// the GPU, or when the one-per-SM ring does not fit the GPU's shared memory (A100); else
// one (the deepest ring).
struct Plan {
    int heads = 0;
    int ctas_per_sm = 1;
    dim3 grid;
};

size_t smem_of(pa::DType t, int D, int heads, int ctas_per_sm) {
    size_t smem = 0;
    with_kernel<false>(t, D, heads, ctas_per_sm, [&](auto, int bytes) { smem = static_cast<size_t>(bytes); });
    return smem;
}

Plan plan(pa::DType t, int B, int H, int Hkv, int D) {
    Plan p;
    p.heads = heads_per_cta(H / Hkv);
    const long long ctas = static_cast<long long>(B) * Hkv;
    const bool big_grid = p.heads == 8 && ctas > pa::current_sm_count();
    p.ctas_per_sm = big_grid ? 2 : 1;
    if (p.ctas_per_sm == 1 && p.heads == 8 && smem_of(t, D, 8, 1) > static_cast<size_t>(pa::current_max_smem_optin()))
        p.ctas_per_sm = 2;
    p.grid = dim3(Hkv, B);
    return p;
}

template <bool TIMELINE>
void launch_plan(const Plan& p, const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const bool built = with_kernel<TIMELINE>(a.dtype, a.D, p.heads, p.ctas_per_sm, [&](auto kernel, int smem) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<p.grid, kMmaThreads, smem, stream>>>(static_cast<T*>(a.out), static_cast<const T*>(a.q),
                                                      static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache),
                                                      a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv,
                                                      a.block_size, a.max_blocks_per_seq, a.scale);
        CUDA_CHECK_LAUNCH();
    });
    if (!built)
        throw pa::CudaError(pa::strf("lesson02 step 5: no %skernel built for %s D %d with %d heads per CTA, %d per SM",
                                     TIMELINE ? "timeline " : "", pa::dtype_name(a.dtype), a.D, p.heads, p.ctas_per_sm));
}

}  // namespace

int heads_per_cta(int group) {
    for (int g : {8, 16, 32})
        if (group <= g) return g;
    return 0;
}

int tile_tokens(int head_size) { return lesson02::tile_tokens(head_size); }

int ctas_per_sm(const pa::DecodeShape& s) { return plan(s.dtype, s.B, s.H, s.Hkv, s.D).ctas_per_sm; }

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const int heads = heads_per_cta(s.group());
    if (heads == 0)
        return pa::strf("the grouped CTA serves at most 32 query heads; group %d needs the per_head mapping", s.group());
    const Plan p = plan(s.dtype, s.B, s.H, s.Hkv, s.D);
    const size_t need = smem_of(s.dtype, s.D, heads, p.ctas_per_sm);
    if (need == 0) return pa::strf("no kernel built for D %d", s.D);
    if (info.smem_per_block_optin > 0 && need + 1024 > static_cast<size_t>(info.smem_per_block_optin))
        return pa::strf("stages K/V through %zu KiB of shared memory per CTA; this GPU (%s) gives %d KiB (step 4 fits)",
                        need / 1024, info.name.c_str(), info.smem_per_block_optin / 1024);
    return "";
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    launch_plan<false>(plan(a.dtype, a.B, a.H, a.Hkv, a.D), a, stream);
}

std::string timeline_why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = why_not(s, info);
    if (why.empty() && s.D != 128) why = "the timeline build of grouped_mma_ws is for D 128 only";
    return why;
}

void launch_timeline(const pa::PagedDecodeArgs& a, uint64_t* timeline, int timeline_stride, cudaStream_t stream) {
    pa::set_timeline_target(timeline, timeline_stride, stream);
    launch_plan<true>(plan(a.dtype, a.B, a.H, a.Hkv, a.D), a, stream);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo&) {
    const Plan p = plan(s.dtype, s.B, s.H, s.Hkv, s.D);
    pa::LaunchGeometry g;
    with_kernel<false>(s.dtype, s.D, p.heads, p.ctas_per_sm, [&](auto kernel, int smem) {
        const void* k = reinterpret_cast<const void*>(kernel);
        pa::opt_in_max_dynamic_smem(k);
        g.ctas = static_cast<long long>(p.grid.x) * p.grid.y;
        g.threads = kMmaThreads;
        g.smem_bytes = smem;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g.ctas_per_sm, k, g.threads, g.smem_bytes));
    });
    return g;
}

}  // namespace lesson02::step5
