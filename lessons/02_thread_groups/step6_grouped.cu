// Step 6's instantiations, listed once (with_kernel), and its launcher.
#include <algorithm>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "step6_grouped.cuh"
#include "steps.h"
#include "table.h"

namespace lesson02::step6 {

namespace {

// Logits of one chunk get at most this much shared memory; a longer context is walked in chunks.
constexpr int kLogitBudgetBytes = 32 * 1024;

int chunk_tokens(int heads_per_cta, int max_ctx) {
    const int budget = kLogitBudgetBytes / (4 * heads_per_cta) / kChunkAlign * kChunkAlign;
    const int whole = (max_ctx + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    return std::max(kChunkAlign, std::min(budget, whole));
}

// Every instantiation: dtype x D {64, 128, 256} x TGS {4, 8, 16} x heads per CTA {1, 2, 4,
// 8, 32}. Calls f(kernel, token_lanes) and returns true, or returns false when the
// combination was not built.
template <class F>
bool with_kernel(pa::DType t, int D, int tgs, int heads, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<4, 8, 16>(tgs, [&](auto g) {
                return pa::dispatch_int<1, 2, 4, 8, 32>(heads, [&](auto n) {
                    f(grouped_decode_kernel<T, d.value, g.value, n.value>, PvLayout<d.value, n.value>::kTokenLanes);
                    return true;
                });
            });
        });
    });
}

struct Plan {
    int heads = 0;   // query heads one CTA serves (1 for the per-head mapping)
    int chunk = 0;   // tokens per softmax chunk
    dim3 grid;
};

Plan plan(Mapping m, int B, int H, int Hkv, int max_ctx) {
    Plan p;
    p.heads = heads_per_cta(m, H / Hkv);
    p.chunk = chunk_tokens(std::max(p.heads, 1), max_ctx);
    p.grid = dim3(m == Mapping::per_head ? H : Hkv, B);
    return p;
}

size_t smem_bytes(int D, int heads, int chunk, int token_lanes) {
    return sizeof(float) * static_cast<size_t>(smem_words(D, heads, chunk, token_lanes));
}

[[noreturn]] void not_built(pa::DType t, int D, int tgs, int heads) {
    throw pa::CudaError(pa::strf("lesson02 step 6: no kernel built for %s D %d TGS %d with %d heads per CTA",
                                 pa::dtype_name(t), D, tgs, heads));
}

}  // namespace

int heads_per_cta(Mapping m, int group) {
    if (m == Mapping::per_head || group == 1) return 1;
    for (int g : {2, 4, 8, 32})
        if (group <= g) return g;
    return 0;  // a group above 32 has no grouped kernel
}

std::string why_not(Mapping m, const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info) {
    const int heads = heads_per_cta(m, s.group());
    if (heads == 0)
        return pa::strf("the grouped CTA serves at most 32 query heads; group %d needs the per_head mapping", s.group());
    const Plan p = plan(m, s.B, s.H, s.Hkv, s.max_ctx());
    std::string why;
    const bool built = with_kernel(s.dtype, s.D, tgs, heads, [&](auto kernel, int token_lanes) {
        const size_t need = smem_bytes(s.D, heads, p.chunk, token_lanes);
        const int limit = pa::max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        if (need > static_cast<size_t>(limit))
            why = pa::strf("stages K/V through %zu KiB of shared memory per CTA; this GPU (%s) gives %d KiB", need / 1024,
                           info.name.c_str(), limit / 1024);
    });
    if (!built) return pa::strf("no kernel built for D %d with TGS %d", s.D, tgs);
    return why;
}

void launch(Mapping m, const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream) {
    const Plan p = plan(m, a.B, a.H, a.Hkv, a.max_ctx);
    const bool built = with_kernel(a.dtype, a.D, tgs, p.heads, [&](auto kernel, int token_lanes) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<p.grid, kThreads, smem_bytes(a.D, p.heads, p.chunk, token_lanes), stream>>>(
            static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
            static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
            a.max_blocks_per_seq, a.scale, p.chunk);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) not_built(a.dtype, a.D, tgs, p.heads);
}

pa::LaunchGeometry geometry(Mapping m, const pa::DecodeShape& s, int tgs, const pa::DeviceInfo&) {
    const Plan p = plan(m, s.B, s.H, s.Hkv, s.max_ctx());
    pa::LaunchGeometry g;
    const bool built = with_kernel(s.dtype, s.D, tgs, p.heads, [&](auto kernel, int token_lanes) {
        const void* k = reinterpret_cast<const void*>(kernel);
        pa::opt_in_max_dynamic_smem(k);
        g.ctas = static_cast<long long>(p.grid.x) * p.grid.y;
        g.threads = kThreads;
        g.smem_bytes = static_cast<int>(smem_bytes(s.D, p.heads, p.chunk, token_lanes));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(k), g.threads, g.smem_bytes);
    });
    if (!built) not_built(s.dtype, s.D, tgs, p.heads);
    return g;
}

}  // namespace lesson02::step6
