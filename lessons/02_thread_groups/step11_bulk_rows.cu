// Step 11's instantiations, listed once (Kernels), and its launcher. The layout (heads per
// CTA, CTAs per SM, the grid) is step 10's: the same MmaLayout, the same rule.
#include "grouped_launch.cuh"
#include "step11_bulk_rows.cuh"
#include "steps.h"

namespace lesson02::step11 {

namespace {

struct Kernels {
    template <class T, int D, int HEADS, int CTAS_PER_SM>
    static auto kernel() { return grouped_bulk_decode_kernel<T, D, HEADS, CTAS_PER_SM>; }
};

}  // namespace

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = step10::why_not(s, info);
    if (why.empty())
        why = needs_sm90<Kernels>(s, step10::heads_per_cta(s.group()), step10::ctas_per_sm(s, info), info);
    return why;
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    launch_family<Kernels>(a, step10::ctas_per_sm(pa::launch_shape(a), pa::current_device_info()), "step 11", stream);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return family_geometry<Kernels>(s, step10::ctas_per_sm(s, info));
}

}  // namespace lesson02::step11
