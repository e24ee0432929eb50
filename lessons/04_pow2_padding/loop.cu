// The plain comparison: a loop over the segments. Every instantiation compiled once, here.
#include "cuda_check.cuh"
#include "lesson04.h"
#include "reduce_dispatch.cuh"
#include "table.h"

namespace lesson04 {

void launch_loop(const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream) {
    const std::string why = reduce_why_not(Fix::loop, a.D, s.max_partitions);
    if (!why.empty()) throw pa::CudaError("lesson04 loop: " + why);
    const bool built = with_loop_kernel(a.dtype, a.D, [&](auto kernel, int threads) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        const size_t smem = sizeof(float) * static_cast<size_t>(s.max_partitions);  // the weights
        kernel<<<dim3(a.H, a.B), threads, smem, stream>>>(static_cast<T*>(a.out), s.m, s.l, s.acc, s.max_partitions);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(pa::strf("lesson04 loop: no reduce built for %s, head size %d",
                                             pa::dtype_name(a.dtype), a.D));
}

}  // namespace lesson04
