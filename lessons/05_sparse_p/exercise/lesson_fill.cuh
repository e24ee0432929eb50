// The fill-in's answer is the lesson itself: this graded file hands the grader step 10's own
// kernel (../step10_compact_ordered.cuh) under the name student.cuh uses. The honesty test
// grades it: it must pass, at a speed ratio near 1.
#pragma once

#include "step10_compact_ordered.cuh"

namespace ex_fill {

template <class scalar_t, int CTAS_PER_SM, int SEQS, int STAGES>
inline constexpr auto compact_ordered_gated_kernel = &lesson05::compact_ordered_gated_kernel<scalar_t, CTAS_PER_SM, SEQS, STAGES>;

}  // namespace ex_fill
