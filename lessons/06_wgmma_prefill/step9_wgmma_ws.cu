// Step 9's instantiations (one per policy) and launcher. Built for sm_90a only.
#include "step9_wgmma_ws.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_wgmma_ws_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step9::wgmma_ws_prefill_kernel<SoftmaxPolicy<step9::kNB>>);
    else
        f(step9::wgmma_ws_prefill_kernel<GatePolicy<step9::kNB>>);
}

}  // namespace

void launch_wgmma_ws(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step9::kRows);
    const Maps maps = make_maps(a, step9::kRows);
    with_wgmma_ws_kernel(p, [&](auto kernel) {
        launch_tiles128(kernel, a, step9::kThreads, step9::kSmemBytes, stream, b, policy_params(a), maps);
    });
}

Geometry geometry_wgmma_ws(const PrefillShape& s) {
    Geometry g;
    with_wgmma_ws_kernel(Policy::softmax, [&](auto kernel) {
        g = geometry_tiles128(kernel, s, step9::kThreads, step9::kSmemBytes);
    });
    return g;
}

}  // namespace lesson06
