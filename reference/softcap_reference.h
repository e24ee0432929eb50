// CPU reference for decode with logit soft-capping (Gemma 2), in double, from the rounded inputs.
//
//   s_t = scale * q . k_t                  the scaled logit, as in decode_reference.h
//   s_t <- cap * tanh(s_t / cap)           squashed smoothly into (-cap, cap) before the softmax
//   out = sum_t softmax_t(s) v_t
//
// A cap of 0 (or less) turns capping off: plain softmax decode (a model config without
// attn_logit_softcapping). Lesson 02's softcap exercise is checked with it.
#pragma once

#include <cmath>
#include <vector>

#include "decode_reference.h"

namespace pa::reference {

// The score-to-P step with soft-capping: the cap first, then the ordinary softmax.
struct SoftcapSoftmaxP {
    double cap = 0;  // <= 0: no cap
    std::vector<double> operator()(std::vector<double> s) const {
        if (cap > 0)
            for (double& x : s) x = cap * std::tanh(x / cap);
        return SoftmaxP{}(s);
    }
};

// Returns out as [B, H, D].
template <class Inputs>
std::vector<double> softcap_decode(const Inputs& in, double scale, double cap) {
    return decode_with_weights(in, scale, SoftcapSoftmaxP{cap});
}

inline std::vector<double> softcap_decode(const DecodeProblem& p, double cap) {
    return softcap_decode(PagedDecodeView(p), p.scale, cap);
}

}  // namespace pa::reference
