// Lesson 06, step 11: the softmax's 2^x in one instruction (sm_90a only).
//
// What changed since step 10 (wgmma_persistent), and why: the softmax raises 2 to the power of
// every score, 8192 a consumer warpgroup per KV tile, and exp2f without --use_fast_math is four
// instructions: a test for a result below 2^-126, a multiply of the argument, MUFU.EX2, and a
// multiply of the result, so that a denormal comes out exact. Here the consumers' ALU time is
// what the other warpgroup's MMAs must hide, and a weight below 2^-126 (against the row's max of
// 1) adds nothing a bf16 P can carry anyway: ex2.approx.ftz, the MUFU instruction alone, flushes
// it to 0. The kernel is step 10's; only the softmax policy's exponent changes (the gate has
// none, so its variant here is step 10's kernel).
// Run: lesson06_wgmma_prefill [--check | --bench] [--variant wgmma_fast_exp2_softmax]
#pragma once

#include "policies.cuh"
#include "step10_wgmma_persistent.cuh"

namespace lesson06::step11 {

// 2^x as one MUFU.EX2: a result below 2^-126 flushes to 0.
struct Exp2Ftz {
    __device__ __forceinline__ static float apply(float x) {
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
        return y;
    }
};

// A policy with the exponent swapped (the softmax); any other policy as it is.
template <class Policy>
struct FastExp2 {
    using type = Policy;
};
template <int NB>
struct FastExp2<SoftmaxPolicy<NB>> {
    using type = SoftmaxPolicy<NB, Exp2Ftz>;
};

template <class Policy>
constexpr auto wgmma_fast_exp2_prefill_kernel = step10::wgmma_persistent_prefill_kernel<typename FastExp2<Policy>::type>;

}  // namespace lesson06::step11
