// Step 12's instantiations, listed once (Kernels), and its launcher. The layout (heads per
// CTA, the grid, MmaLayout) is step 10's; its rule for CTAs per SM differs (ctas_per_sm).
#include "grouped_launch.cuh"
#include "step12_unit_copies.cuh"
#include "steps.h"

namespace lesson02::step12 {

namespace {

struct Kernels {
    template <class T, int D, int HEADS, int CTAS_PER_SM>
    static auto kernel() { return grouped_unit_decode_kernel<T, D, HEADS, CTAS_PER_SM>; }
};

}  // namespace

// A unit is 16 tokens (8 at D 256, whose tile is 64) and must not straddle pages.
std::string pages_why_not(int D, int block_size) {
    const int unit_rows = tile_tokens(D) / 8;
    if (block_size >= unit_rows) return "";
    return pa::strf("copies %d-token units of a page, and pages of %d tokens are smaller (step 11 runs them)", unit_rows,
                    block_size);
}

int ctas_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    if (step10::heads_per_cta(s.group()) == 8 && static_cast<long long>(s.B) * s.Hkv >= 0.9 * info.sms) return 2;
    return step10::ctas_per_sm(s, info);
}

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = step10::why_not(s, info);
    if (why.empty()) why = pages_why_not(s.D, s.block_size);
    if (why.empty())
        why = needs_sm90<Kernels>(s, step10::heads_per_cta(s.group()), ctas_per_sm(s, info), info);
    return why;
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const std::string pages = pages_why_not(a.D, a.block_size);
    if (!pages.empty()) throw pa::CudaError("lesson02 step 12: " + pages);
    launch_family<Kernels>(a, ctas_per_sm(pa::launch_shape(a), pa::current_device_info()), "step 12", stream);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return family_geometry<Kernels>(s, ctas_per_sm(s, info));
}

}  // namespace lesson02::step12
