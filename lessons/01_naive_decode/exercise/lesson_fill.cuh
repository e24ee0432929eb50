// The fill-in's answer is the lesson itself: this graded file hands the grader lesson 01's own
// kernel (naive_decode.cuh) under the name student.cuh uses. The honesty test grades it: it
// must pass, at a speed ratio near 1.
#pragma once

#include "naive_decode.cuh"

namespace ex_fill {

template <class scalar_t, int HEAD_SIZE>
inline constexpr auto decode_kernel = &lesson01::naive_paged_decode_kernel<scalar_t, HEAD_SIZE>;

}  // namespace ex_fill
