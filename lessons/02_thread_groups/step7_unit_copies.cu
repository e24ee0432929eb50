// Step 7's instantiations, listed once (with_kernel), and its launcher. The layout (heads per
// CTA, the grid, MmaLayout) is step 5's; its rule for CTAs per SM differs (ctas_per_sm).
#include "grouped_launch.cuh"
#include "step7_unit_copies.cuh"
#include "steps.h"

namespace lesson02::step7 {

namespace {

struct Kernels {
    template <class T, int D, int HEADS, int CTAS_PER_SM>
    static auto kernel() { return grouped_unit_decode_kernel<T, D, HEADS, CTAS_PER_SM>; }
};

template <class F>
bool with_kernel(pa::DType t, int D, int heads, int ctas_per_sm, F&& f) {
    return with_grouped_kernel<Kernels>(t, D, heads, ctas_per_sm, f);
}

// A unit is 16 tokens (8 at D 256, whose tile is 64) and must not straddle pages.
std::string pages_why_not(int D, int block_size) {
    const int unit_rows = tile_tokens(D) / 8;
    if (block_size >= unit_rows) return "";
    return pa::strf("copies %d-token units of a page, and pages of %d tokens are smaller (step 6 runs them)", unit_rows,
                    block_size);
}

}  // namespace

int ctas_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    if (step5::heads_per_cta(s.group()) == 8 && static_cast<long long>(s.B) * s.Hkv >= 0.9 * info.sms) return 2;
    return step5::ctas_per_sm(s, info);
}

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = step5::why_not(s, info);
    if (why.empty()) why = pages_why_not(s.D, s.block_size);
    if (why.empty())
        why = needs_sm90<Kernels>(s, step5::heads_per_cta(s.group()), ctas_per_sm(s, info), info);
    return why;
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const std::string pages = pages_why_not(a.D, a.block_size);
    if (!pages.empty()) throw pa::CudaError("lesson02 step 7: " + pages);
    const pa::DecodeShape s = pa::launch_shape(a);
    const int heads = step5::heads_per_cta(s.group()), per_sm = ctas_per_sm(s, pa::current_device_info());
    if (!with_kernel(a.dtype, a.D, heads, per_sm, [&](auto kernel, int smem) { launch_grouped(kernel, smem, a, stream); }))
        throw pa::CudaError(pa::strf("lesson02 step 7: no kernel built for %s D %d with %d heads per CTA, %d per SM",
                                     pa::dtype_name(a.dtype), a.D, heads, per_sm));
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    pa::LaunchGeometry g;
    with_kernel(s.dtype, s.D, step5::heads_per_cta(s.group()), ctas_per_sm(s, info),
                [&](auto kernel, int smem) { g = grouped_geometry(kernel, smem, s); });
    return g;
}

}  // namespace lesson02::step7
