// The right fix: the pow2 reduce with masked loads (kMasked = true) over the real-size
// scratch. Every instantiation compiled once, here.
#include "cuda_check.cuh"
#include "launch_utils.cuh"
#include "lesson04.h"
#include "reduce_dispatch.cuh"
#include "table.h"

namespace lesson04 {

void launch_pow2_lanes(const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream,
                       bool dependent) {
    const std::string why = reduce_why_not(Fix::pow2_lanes, a.D, s.max_partitions);
    if (!why.empty()) throw pa::CudaError("lesson04 pow2_lanes: " + why);
    const bool built = with_pow2_kernel<true>(a.dtype, a.D, next_pow2(s.max_partitions), [&](auto kernel, int threads) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::launch_maybe_dependent(kernel, dim3(a.H, a.B), dim3(threads), stream, dependent, static_cast<T*>(a.out),
                                   static_cast<const float*>(s.m), static_cast<const float*>(s.l),
                                   static_cast<const float*>(s.acc), s.max_partitions);
    });
    if (!built) throw pa::CudaError(pa::strf("lesson04 pow2_lanes: no reduce built for %s, head size %d, %d segments",
                                             pa::dtype_name(a.dtype), a.D, s.max_partitions));
}

}  // namespace lesson04
