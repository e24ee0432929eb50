// The fill-in's answer is the lesson itself: this graded file hands the grader lesson 03's own
// step 1 (step1_partitions.cuh's partition kernel, split_reduce.cuh's reduce) under the names
// student.cuh uses. The honesty test grades it: it must pass, at a speed ratio near 1.
#pragma once

#include "split_reduce.cuh"
#include "step1_partitions.cuh"

namespace ex_fill {

using lesson03::kReduceThreads;

template <class scalar_t, int HEAD_SIZE, int TGS>
inline constexpr auto partitions_kernel = &lesson03::step1::partitions_kernel<scalar_t, HEAD_SIZE, TGS>;
template <class scalar_t, int HEAD_SIZE>
inline constexpr auto split_k_reduce_kernel = &lesson03::split_k_reduce_kernel<scalar_t, HEAD_SIZE>;

}  // namespace ex_fill
