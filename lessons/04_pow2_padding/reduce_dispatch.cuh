// Every instantiation of lesson 04's reduce kernels, listed once (common/dispatch.cuh). Each
// reduce_*.cu includes this and instantiates only its own kernels, so the three compile in
// parallel; a value not in these lists makes the with_* function return false, and the
// launcher refuses it by name.
#pragma once

#include "dispatch.cuh"
#include "reduce_kernels.cuh"

namespace lesson04 {

// Calls f(kernel, threads) for the pow2 reduce of this dtype, head size and width
// (kMasked: pow2_lanes; not: pad_scratch). Head sizes 64, 128, 256; SEGMENTS_P2 1 .. 1024.
template <bool kMasked, class F>
bool with_pow2_kernel(pa::DType t, int head_size, int segments_p2, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(head_size, [&](auto d) {
            return pa::dispatch_int<1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024>(segments_p2, [&](auto p) {
                f(pow2_reduce_kernel<T, d.value, p.value, kMasked>, pow2_threads(p.value, d.value));
                return true;
            });
        });
    });
}

// Calls f(kernel, threads) for the loop reduce of this dtype and head size (64, 128, 256).
template <class F>
bool with_loop_kernel(pa::DType t, int head_size, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(head_size, [&](auto d) {
            f(loop_reduce_kernel<T, d.value>, d.value);
            return true;
        });
    });
}

}  // namespace lesson04
