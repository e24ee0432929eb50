#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pa {

Tolerance tolerance_for(DType t) {
    // fp16 rounding alone gives a relative error near 3e-4; bf16 near 2.5e-3.
    return t == DType::fp16 ? Tolerance{2e-3, 2e-3} : Tolerance{1.6e-2, 1.6e-2};
}

namespace {

template <class Get>
CheckResult compare_impl(size_t n, Get get, const std::vector<double>& ref, Tolerance tol) {
    CheckResult r;
    if (ref.size() != n) {
        r.message = "output has " + std::to_string(n) + " elements, reference " + std::to_string(ref.size());
        return r;
    }
    double diff2 = 0, ref2 = 0, ref_max = 0;
    for (size_t i = 0; i < n; ++i) {
        const double o = get(i);
        if (!std::isfinite(o)) { ++r.nan_count; continue; }
        const double d = o - ref[i];
        diff2 += d * d;
        ref2 += ref[i] * ref[i];
        ref_max = std::max(ref_max, std::fabs(ref[i]));
        r.max_abs_err = std::max(r.max_abs_err, std::fabs(d));
    }
    r.rel_err = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    char buf[256];
    if (r.nan_count > 0) {
        std::snprintf(buf, sizeof buf, "%lld of %zu outputs are NaN/inf or unwritten", r.nan_count, n);
        r.message = buf;
    } else if (r.rel_err > tol.rel) {
        std::snprintf(buf, sizeof buf, "relative error %.3e exceeds %.1e", r.rel_err, tol.rel);
        r.message = buf;
    } else if (r.max_abs_err > tol.abs * std::max(1.0, ref_max)) {
        std::snprintf(buf, sizeof buf, "max abs error %.3e exceeds %.1e", r.max_abs_err, tol.abs * std::max(1.0, ref_max));
        r.message = buf;
    } else {
        r.pass = true;
    }
    return r;
}

}  // namespace

CheckResult compare_output(const std::vector<uint16_t>& out, const std::vector<double>& ref, DType t) {
    return compare_impl(out.size(), [&](size_t i) { return static_cast<double>(decode(t, out[i])); }, ref, tolerance_for(t));
}

CheckResult compare_output(const std::vector<float>& out, const std::vector<double>& ref, Tolerance tol) {
    return compare_impl(out.size(), [&](size_t i) { return static_cast<double>(out[i]); }, ref, tol);
}

}  // namespace pa
