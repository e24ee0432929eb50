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

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) { return unit_family_why_not<Kernels>(s, info); }

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) { launch_unit_family<Kernels>(a, "step 12", stream); }

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return unit_family_geometry<Kernels>(s, info);
}

}  // namespace lesson02::step12
