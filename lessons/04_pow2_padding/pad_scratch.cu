// The wrong fix: the pow2 reduce without masks (kMasked = false), reading every entry of a
// scratch padded to a power of two. Every instantiation compiled once, here.
#include "cuda_check.cuh"
#include "lesson04.h"
#include "reduce_dispatch.cuh"
#include "table.h"

namespace lesson04 {

void launch_pad_scratch(const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream) {
    const std::string why = reduce_why_not(Fix::pad_scratch, a.D, s.max_partitions);
    if (!why.empty()) throw pa::CudaError("lesson04 pad_scratch: " + why);
    const bool built = with_pow2_kernel<false>(a.dtype, a.D, s.max_partitions, [&](auto kernel, int threads) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        kernel<<<dim3(a.H, a.B), threads, 0, stream>>>(static_cast<T*>(a.out), s.m, s.l, s.acc, s.max_partitions);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(pa::strf("lesson04 pad_scratch: no reduce built for %s, head size %d, %d segments",
                                             pa::dtype_name(a.dtype), a.D, s.max_partitions));
}

}  // namespace lesson04
