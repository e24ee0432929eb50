// Step 13's instantiations, listed once (Kernels), and its launcher. Everything but the kernel
// is step 12's (grouped_launch.cuh: the layout rule, the page rule, the shared memory asked for).
#include "grouped_launch.cuh"
#include "step13_aligned_units.cuh"
#include "steps.h"

namespace lesson02::step13 {

namespace {

struct Kernels {
    template <class T, int D, int HEADS, int CTAS_PER_SM>
    static auto kernel() { return grouped_aligned_decode_kernel<T, D, HEADS, CTAS_PER_SM>; }
};

}  // namespace

bool shares_sms(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return step10::heads_per_cta(s.group()) == 8 && static_cast<long long>(s.B) * s.Hkv >= kGridOverSms * info.sms;
}

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) { return unit_family_why_not<Kernels>(s, info); }

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) { launch_unit_family<Kernels>(a, "step 13", stream); }

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return unit_family_geometry<Kernels>(s, info);
}

}  // namespace lesson02::step13
