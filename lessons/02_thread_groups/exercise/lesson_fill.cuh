// The fill-in's answer is the lesson itself: this graded file hands the grader step 1's own
// kernel (../step1_thread_groups.cuh) under the name student.cuh uses. The honesty test grades
// it: it must pass, at a speed ratio near 1.
#pragma once

#include "step1_thread_groups.cuh"

namespace ex_fill {

template <class scalar_t, int HEAD_SIZE, int TGS>
inline constexpr auto decode_kernel = &lesson02::step1::thread_groups_decode_kernel<scalar_t, HEAD_SIZE, TGS>;

}  // namespace ex_fill
