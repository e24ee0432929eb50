// Comparing a kernel's output with a double-precision reference.
//
// The error is measured as ||out - ref|| / ||ref|| (relative, 2-norm) and as the largest
// absolute difference. Bounds are tied to the storage dtype: the output is rounded to
// fp16 (11 significant bits) or bf16 (8), so bf16 gets bounds eight times looser.
// A NaN anywhere, or an element left as the poison value (NaN), fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"

namespace pa {

struct Tolerance {
    double rel = 0;  // bound on ||out - ref|| / ||ref||
    double abs = 0;  // bound on max |out - ref|, relative to max(1, max |ref|)
};

Tolerance tolerance_for(DType t);

struct CheckResult {
    bool pass = false;
    double rel_err = 0;
    double max_abs_err = 0;
    long long nan_count = 0;  // NaN or inf in the output (an unwritten, poisoned element reads as NaN)
    std::string message;      // why it failed, empty on pass
};

// `out` holds dtype-encoded values; `ref` the reference in double, same order and size.
CheckResult compare_output(const std::vector<uint16_t>& out, const std::vector<double>& ref, DType t);
// Same for outputs kept in float (fp32 scratch, partial results).
CheckResult compare_output(const std::vector<float>& out, const std::vector<double>& ref, Tolerance tol);

}  // namespace pa
