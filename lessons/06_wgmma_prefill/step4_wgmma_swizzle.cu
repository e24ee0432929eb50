// Step 4's instantiations (one per policy) and launcher. Built for sm_90a only.
#include "step4_wgmma_swizzle.cuh"

#include "steps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_wgmma_swizzle_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step4::wgmma_prefill_kernel<SoftmaxPolicy<step4::kNB>>);
    else
        f(step4::wgmma_prefill_kernel<GatePolicy<step4::kNB>>);
}

}  // namespace

void launch_wgmma_swizzle(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step4::kRows);
    with_wgmma_swizzle_kernel(p, [&](auto kernel) {
        launch_tiles128(kernel, a, step4::kThreads, step4::kSmemBytes, stream, b, policy_params(a));
    });
}

Geometry geometry_wgmma_swizzle(const PrefillShape& s) {
    Geometry g;
    with_wgmma_swizzle_kernel(Policy::softmax, [&](auto kernel) {
        g = geometry_tiles128(kernel, s, step4::kThreads, step4::kSmemBytes);
    });
    return g;
}

}  // namespace lesson06
