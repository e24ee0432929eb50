// Step 10's instantiations, listed once (with_kernel), its layout rule, and its launchers: the
// measured kernel and its timeline build.
#include "grouped_launch.cuh"
#include "step10_warp_specialized.cuh"
#include "steps.h"

namespace lesson02::step10 {

namespace {

// The measured kernel (TIMELINE = false) and its timeline build, for grouped_launch.cuh.
template <bool TIMELINE>
struct Kernels {
    template <class T, int D, int HEADS, int CTAS_PER_SM>
    static auto kernel() { return grouped_mma_decode_kernel<T, D, HEADS, CTAS_PER_SM, TIMELINE>; }
};

// Every instantiation (grouped_launch.cuh); the timeline build for D 128 only (every Table A
// and Table C shape), to keep the compile short.
template <bool TIMELINE, class F>
bool with_kernel(pa::DType t, int D, int heads, int ctas_per_sm, F&& f) {
    if (TIMELINE && D != 128) return false;
    return with_grouped_kernel<Kernels<TIMELINE>>(t, D, heads, ctas_per_sm, f);
}

size_t smem_of(pa::DType t, int D, int heads, int ctas_per_sm) {
    size_t smem = 0;
    with_kernel<false>(t, D, heads, ctas_per_sm, [&](auto, int bytes) { smem = static_cast<size_t>(bytes); });
    return smem;
}

template <bool TIMELINE>
void launch_built(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const pa::DecodeShape s = pa::launch_shape(a);
    const int heads = heads_per_cta(s.group()), per_sm = ctas_per_sm(s, pa::current_device_info());
    const bool built = with_kernel<TIMELINE>(a.dtype, a.D, heads, per_sm,
                                             [&](auto kernel, int smem) { launch_grouped(kernel, smem, a, stream); });
    if (!built)
        throw pa::CudaError(pa::strf("lesson02 step 10: no %skernel built for %s D %d with %d heads per CTA, %d per SM",
                                     TIMELINE ? "timeline " : "", pa::dtype_name(a.dtype), a.D, heads, per_sm));
}

}  // namespace

int heads_per_cta(int group) {
    for (int g : {8, 16, 32})
        if (group <= g) return g;
    return 0;
}

int tile_tokens(int head_size) { return lesson02::tile_tokens(head_size); }

// Two CTAs per SM (3-slot rings) when one 8-head column block serves a grid larger than the
// GPU, or when the one-per-SM ring does not fit the GPU's shared memory (A100); else one (the
// deepest ring).
int ctas_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const int heads = heads_per_cta(s.group());
    if (heads != 8) return 1;
    if (static_cast<long long>(s.B) * s.Hkv > info.sms) return 2;
    const size_t ring = smem_of(s.dtype, s.D, 8, 1);
    const bool ring_fits = info.smem_per_block_optin <= 0 || ring <= static_cast<size_t>(info.smem_per_block_optin);
    return ring_fits ? 1 : 2;
}

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const int heads = heads_per_cta(s.group());
    if (heads == 0)
        return pa::strf("the grouped CTA serves at most 32 query heads; group %d needs the per_head mapping", s.group());
    const size_t need = smem_of(s.dtype, s.D, heads, ctas_per_sm(s, info));
    if (need == 0) return pa::strf("no kernel built for D %d", s.D);
    if (info.smem_per_block_optin > 0 && need + 1024 > static_cast<size_t>(info.smem_per_block_optin))
        return pa::strf("stages K/V through %zu KiB of shared memory per CTA; this GPU (%s) gives %d KiB (step 9 fits)",
                        need / 1024, info.name.c_str(), info.smem_per_block_optin / 1024);
    return "";
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    launch_built<false>(a, stream);
}

std::string timeline_why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = why_not(s, info);
    if (why.empty() && s.D != 128) why = "the timeline build of grouped_mma_ws is for D 128 only";
    return why;
}

void launch_timeline(const pa::PagedDecodeArgs& a, uint64_t* timeline, int timeline_stride, cudaStream_t stream) {
    pa::set_timeline_target(timeline, timeline_stride, stream);
    launch_built<true>(a, stream);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    pa::LaunchGeometry g;
    with_kernel<false>(s.dtype, s.D, heads_per_cta(s.group()), ctas_per_sm(s, info),
                       [&](auto kernel, int smem) { g = grouped_geometry(kernel, smem, s); });
    return g;
}

}  // namespace lesson02::step10
