// Step 8's instantiations (one per policy) and launcher. Built for sm_90a only.
#include "step8_wgmma_overlap.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_wgmma_overlap_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step8::wgmma_ws_prefill_kernel<SoftmaxPolicy<step8::kNB>>);
    else
        f(step8::wgmma_ws_prefill_kernel<GatePolicy<step8::kNB>>);
}

}  // namespace

void launch_wgmma_overlap(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step8::kRows);
    const Maps maps = make_maps(a, step8::kRows);
    with_wgmma_overlap_kernel(p, [&](auto kernel) {
        launch_tiles128(kernel, a, step8::kThreads, step8::kSmemBytes, stream, b, policy_params(a), maps);
    });
}

Geometry geometry_wgmma_overlap(const PrefillShape& s) {
    Geometry g;
    with_wgmma_overlap_kernel(Policy::softmax, [&](auto kernel) {
        g = geometry_tiles128(kernel, s, step8::kThreads, step8::kSmemBytes);
    });
    return g;
}

}  // namespace lesson06
