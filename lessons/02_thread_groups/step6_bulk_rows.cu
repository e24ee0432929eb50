// Step 6's instantiations, listed once (with_kernel), and its launcher. The layout (heads per
// CTA, CTAs per SM, the grid) is step 5's: the same MmaLayout, the same rule.
#include "grouped_launch.cuh"
#include "step6_bulk_rows.cuh"
#include "steps.h"

namespace lesson02::step6 {

namespace {

struct Kernels {
    template <class T, int D, int HEADS, int CTAS_PER_SM>
    static auto kernel() { return grouped_bulk_decode_kernel<T, D, HEADS, CTAS_PER_SM>; }
};

template <class F>
bool with_kernel(pa::DType t, int D, int heads, int ctas_per_sm, F&& f) {
    return with_grouped_kernel<Kernels>(t, D, heads, ctas_per_sm, f);
}

}  // namespace

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = step5::why_not(s, info);
    if (why.empty())
        why = needs_sm90<Kernels>(s, step5::heads_per_cta(s.group()), step5::ctas_per_sm(s, info), info);
    return why;
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const pa::DecodeShape s = pa::launch_shape(a);
    const int heads = step5::heads_per_cta(s.group()), per_sm = step5::ctas_per_sm(s, pa::current_device_info());
    if (!with_kernel(a.dtype, a.D, heads, per_sm, [&](auto kernel, int smem) { launch_grouped(kernel, smem, a, stream); }))
        throw pa::CudaError(pa::strf("lesson02 step 6: no kernel built for %s D %d with %d heads per CTA, %d per SM",
                                     pa::dtype_name(a.dtype), a.D, heads, per_sm));
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    pa::LaunchGeometry g;
    with_kernel(s.dtype, s.D, step5::heads_per_cta(s.group()), step5::ctas_per_sm(s, info),
                [&](auto kernel, int smem) { g = grouped_geometry(kernel, smem, s); });
    return g;
}

}  // namespace lesson02::step6
