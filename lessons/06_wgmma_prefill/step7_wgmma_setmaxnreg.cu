// Step 7's instantiations (one per policy) and launcher. Built for sm_90a only.
#include "step7_wgmma_setmaxnreg.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_wgmma_setmaxnreg_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step7::wgmma_ws_prefill_kernel<SoftmaxPolicy<step7::kNB>>);
    else
        f(step7::wgmma_ws_prefill_kernel<GatePolicy<step7::kNB>>);
}

}  // namespace

void launch_wgmma_setmaxnreg(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step7::kRows);
    const Maps maps = make_maps(a, step7::kRows);
    with_wgmma_setmaxnreg_kernel(p, [&](auto kernel) {
        launch_tiles128(kernel, a, step7::kThreads, step7::kSmemBytes, stream, b, policy_params(a), maps);
    });
}

Geometry geometry_wgmma_setmaxnreg(const PrefillShape& s) {
    Geometry g;
    with_wgmma_setmaxnreg_kernel(Policy::softmax, [&](auto kernel) {
        g = geometry_tiles128(kernel, s, step7::kThreads, step7::kSmemBytes);
    });
    return g;
}

}  // namespace lesson06
