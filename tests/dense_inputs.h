// What the CPU reference tests share: dense (unpaged) decode inputs, which the references
// read through the same logical accessors as a paged cache, and the comparison they use.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "dtype.h"

namespace pa::testing {

// Dense decode inputs: q [B, H, D], K and V [B, ctx_max, Hkv, D] (NaN past a sequence's
// end), values already rounded to `dtype`. The accessors make it an `Inputs` for the references.
struct DenseDecode {
    int nB = 0, nH = 0, nHkv = 0, nD = 0, ctx_max = 0;
    std::vector<int> lens;
    DType dtype = DType::fp16;
    std::vector<double> qd, kd, vd;

    int B() const { return nB; }
    int H() const { return nH; }
    int Hkv() const { return nHkv; }
    int D() const { return nD; }
    int ctx(int b) const { return lens[b]; }
    size_t q_at(int b, int h, int d) const { return (static_cast<size_t>(b) * nH + h) * nD + d; }
    size_t kv_at(int b, int t, int h, int d) const { return ((static_cast<size_t>(b) * ctx_max + t) * nHkv + h) * nD + d; }
    double q(int b, int h, int d) const { return qd[q_at(b, h, d)]; }
    double k(int b, int t, int h, int d) const { return kd[kv_at(b, t, h, d)]; }
    double v(int b, int t, int h, int d) const { return vd[kv_at(b, t, h, d)]; }
};

// Inputs of this shape with every element NaN, to be filled in.
inline DenseDecode blank_dense(int H, int Hkv, int D, std::vector<int> lens, DType t = DType::fp16) {
    DenseDecode x;
    x.nB = static_cast<int>(lens.size());
    x.nH = H;
    x.nHkv = Hkv;
    x.nD = D;
    x.lens = std::move(lens);
    x.dtype = t;
    for (int c : x.lens) x.ctx_max = std::max(x.ctx_max, c);
    x.qd.assign(static_cast<size_t>(x.nB) * H * D, NAN);
    x.kd.assign(static_cast<size_t>(x.nB) * x.ctx_max * Hkv * D, NAN);
    x.vd = x.kd;
    return x;
}

// A dense copy of any decode Inputs (e.g. a paged problem, read through its view).
template <class Inputs>
DenseDecode copy_dense(const Inputs& in) {
    std::vector<int> lens(in.B());
    for (int b = 0; b < in.B(); ++b) lens[b] = in.ctx(b);
    DenseDecode x = blank_dense(in.H(), in.Hkv(), in.D(), lens);
    for (int b = 0; b < x.nB; ++b) {
        for (int h = 0; h < x.nH; ++h)
            for (int d = 0; d < x.nD; ++d) x.qd[x.q_at(b, h, d)] = in.q(b, h, d);
        for (int t = 0; t < x.lens[b]; ++t)
            for (int h = 0; h < x.nHkv; ++h)
                for (int d = 0; d < x.nD; ++d) {
                    x.kd[x.kv_at(b, t, h, d)] = in.k(b, t, h, d);
                    x.vd[x.kv_at(b, t, h, d)] = in.v(b, t, h, d);
                }
    }
    return x;
}

// The largest |a - b| / max(1, |b|); infinity when either side is not finite.
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
        worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.0, std::fabs(b[i])));
    }
    return worst;
}

}  // namespace pa::testing
