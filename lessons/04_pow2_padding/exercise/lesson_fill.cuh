// The fill-in's answer is the lesson itself: this graded file hands the grader lesson 04's own
// pow2_lanes reduce (reduce_kernels.cuh, kMasked = true) under the name student.cuh uses. The
// honesty test grades it: it must pass, at a speed ratio near 1.
#pragma once

#include "reduce_kernels.cuh"

namespace ex_fill {

template <class scalar_t, int HEAD_SIZE, int SEGMENTS_P2>
inline constexpr auto reduce_kernel = &lesson04::pow2_reduce_kernel<scalar_t, HEAD_SIZE, SEGMENTS_P2, true>;

}  // namespace ex_fill
