// Exercise 1's answer: the lesson's own functions (staging_plan.cpp, staging_ring.cpp). The
// grader's reference build uses this file, so the tests prove that the lesson passes.
#pragma once

#include "staging_plan.h"
#include "staging_ring.h"

namespace ex_fill {
using lesson07::head_slice;
using lesson07::prefill_may_write;
using lesson07::rank_heads;
}  // namespace ex_fill
