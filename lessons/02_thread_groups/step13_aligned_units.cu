// Step 13's instantiations, listed once (Kernels), and its launcher. Everything but the kernel
// is step 12's: the layout rule (step12::ctas_per_sm), the page rule, the shared memory asked for.
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

bool fills_two_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return step10::heads_per_cta(s.group()) == 8 && static_cast<long long>(s.B) * s.Hkv >= 2 * 0.95 * info.sms;
}

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = step10::why_not(s, info);
    if (why.empty()) why = step12::pages_why_not(s.D, s.block_size);
    if (why.empty())
        why = needs_sm90<Kernels>(s, step10::heads_per_cta(s.group()), step12::ctas_per_sm(s, info), info);
    return why;
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const std::string pages = step12::pages_why_not(a.D, a.block_size);
    if (!pages.empty()) throw pa::CudaError("lesson02 step 13: " + pages);
    launch_family<Kernels>(a, step12::ctas_per_sm(pa::launch_shape(a), pa::current_device_info()), "step 13", stream);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return family_geometry<Kernels>(s, step12::ctas_per_sm(s, info));
}

}  // namespace lesson02::step13
