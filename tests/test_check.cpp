// pa::compare_output (common/check.h): NaN and poison fail, the tolerance bounds sit
// where they say (relative 2-norm error, and max-abs error scaled by max(1, max |ref|)).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <vector>

#include "check.h"
#include "dtype.h"

using Catch::Matchers::ContainsSubstring;

namespace {

std::vector<uint16_t> encoded(pa::DType t, const std::vector<double>& v) {
    std::vector<uint16_t> out;
    for (double x : v) out.push_back(pa::encode(t, static_cast<float>(x)));
    return out;
}

std::vector<double> ramp(int n) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(std::sin(0.37 * i) * 2.0);
    return v;
}

}  // namespace

TEST_CASE("compare_output: a correctly rounded output passes", "[cpu][check]") {
    for (pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
        INFO(pa::dtype_name(t));
        const std::vector<double> ref = ramp(1000);
        const pa::CheckResult r = pa::compare_output(encoded(t, ref), ref, t);
        CHECK(r.pass);
        CHECK(r.message.empty());
        CHECK(r.nan_count == 0);
        CHECK(r.rel_err > 0);  // rounding is not free
        CHECK(r.rel_err < pa::tolerance_for(t).rel / 2);
    }
}

TEST_CASE("compare_output: NaN, inf and the poison pattern fail", "[cpu][check]") {
    for (pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
        INFO(pa::dtype_name(t));
        const std::vector<double> ref = ramp(64);
        std::vector<uint16_t> out = encoded(t, ref);
        SECTION("one poisoned (never written) element") {
            out[17] = pa::kNaNBits;
            const pa::CheckResult r = pa::compare_output(out, ref, t);
            CHECK(!r.pass);
            CHECK(r.nan_count == 1);
            CHECK_THAT(r.message, ContainsSubstring("NaN/inf or unwritten"));
        }
        SECTION("all poisoned") {
            std::fill(out.begin(), out.end(), pa::kNaNBits);
            const pa::CheckResult r = pa::compare_output(out, ref, t);
            CHECK(!r.pass);
            CHECK(r.nan_count == 64);
        }
        SECTION("a computed NaN and an inf") {
            out[3] = pa::encode(t, NAN);
            out[9] = pa::encode(t, -INFINITY);
            const pa::CheckResult r = pa::compare_output(out, ref, t);
            CHECK(!r.pass);
            CHECK(r.nan_count == 2);
        }
    }
    SECTION("float outputs") {
        const std::vector<double> ref = {1, 2, 3};
        CHECK(!pa::compare_output(std::vector<float>{1, NAN, 3}, ref, pa::Tolerance{1, 1}).pass);
        CHECK(pa::compare_output(std::vector<float>{1, 2, 3}, ref, pa::Tolerance{0, 0}).pass);
    }
}

TEST_CASE("compare_output: sizes must match", "[cpu][check]") {
    const pa::CheckResult r = pa::compare_output(std::vector<float>{1, 2}, std::vector<double>{1, 2, 3}, pa::Tolerance{1, 1});
    CHECK(!r.pass);
    CHECK_THAT(r.message, ContainsSubstring("2 elements"));
}

TEST_CASE("compare_output: relative error bound is inclusive, exceeded fails", "[cpu][check]") {
    // errors of exact powers of two, so the boundary is hit exactly
    const std::vector<double> ref = {1.0, 0.0, 0.0, 0.0};
    const std::vector<float> out = {1.0f + 1.0f / 1024, 0, 0, 0};  // rel err exactly 2^-10
    const pa::CheckResult at = pa::compare_output(out, ref, pa::Tolerance{1.0 / 1024, 1});
    CHECK(at.rel_err == 1.0 / 1024);
    CHECK(at.pass);
    const pa::CheckResult over = pa::compare_output(out, ref, pa::Tolerance{1.0 / 1024 * 0.999, 1});
    CHECK(!over.pass);
    CHECK_THAT(over.message, ContainsSubstring("relative error"));
}

TEST_CASE("compare_output: max-abs bound scales with max(1, max |ref|)", "[cpu][check]") {
    // many accurate elements keep the relative error small; one element is off by 0.0625
    std::vector<double> ref(4096, 0.5);
    std::vector<float> out(ref.begin(), ref.end());
    out[100] += 0.0625f;
    SECTION("|ref| below 1: the bound is tol.abs itself") {
        CHECK(pa::compare_output(out, ref, pa::Tolerance{1, 0.0625}).pass);
        const pa::CheckResult r = pa::compare_output(out, ref, pa::Tolerance{1, 0.0624});
        CHECK(!r.pass);
        CHECK(r.max_abs_err == 0.0625);
        CHECK_THAT(r.message, ContainsSubstring("max abs error"));
    }
    SECTION("|ref| up to 4: the bound is 4 * tol.abs") {
        ref[7] = 4.0;
        out[7] = 4.0f;
        CHECK(pa::compare_output(out, ref, pa::Tolerance{1, 0.0625 / 4}).pass);
        CHECK(!pa::compare_output(out, ref, pa::Tolerance{1, 0.0624 / 4}).pass);
    }
}

TEST_CASE("compare_output: dtype tolerances, a few units in the last place at 1.0", "[cpu][check]") {
    // at 1.0 an fp16 ulp is 2^-10 (bound 2e-3: 2 ulps pass, 3 fail), a bf16 ulp is 2^-7
    // (bound 1.6e-2: 2 ulps pass, 3 fail)
    for (pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
        INFO(pa::dtype_name(t));
        const double ulp = t == pa::DType::fp16 ? 1.0 / 1024 : 1.0 / 128;
        const std::vector<double> ref = {1.0};
        CHECK(pa::compare_output(encoded(t, {1.0 + 2 * ulp}), ref, t).pass);
        CHECK(!pa::compare_output(encoded(t, {1.0 + 3 * ulp}), ref, t).pass);
        CHECK(!pa::compare_output(encoded(t, {1.0 - 3 * ulp}), ref, t).pass);
    }
    CHECK(pa::tolerance_for(pa::DType::bf16).rel > pa::tolerance_for(pa::DType::fp16).rel);
    CHECK(pa::tolerance_for(pa::DType::bf16).abs > pa::tolerance_for(pa::DType::fp16).abs);
}

TEST_CASE("compare_output: an all-zero reference compares absolutely", "[cpu][check]") {
    const std::vector<double> ref(8, 0.0);
    CHECK(pa::compare_output(std::vector<float>(8, 0.f), ref, pa::Tolerance{1e-3, 1e-3}).pass);
    CHECK(!pa::compare_output(std::vector<float>(8, 0.01f), ref, pa::Tolerance{1e-3, 1e-3}).pass);
}
