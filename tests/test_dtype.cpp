// fp16 / bf16 conversions on the host (common/dtype.h): exact values survive, rounding
// is to nearest even, fp16 subnormals and overflow behave as IEEE says, NaN stays NaN.
// Besides named cases, every one of the 65536 bit patterns of each format is checked:
// its value round-trips, and the midpoint to its neighbour rounds to the even one.
#include <catch2/catch_test_macros.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "dtype.h"

namespace {

using pa::DType;

bool is_nan_bits(DType t, uint16_t h) {
    return t == DType::fp16 ? ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0)
                            : ((h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0);
}
uint16_t inf_bits(DType t) { return t == DType::fp16 ? 0x7c00 : 0x7f80; }

// The value of an fp16 pattern, computed from the IEEE definition (not from dtype.h).
double fp16_value(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

}  // namespace

TEST_CASE("fp16: exactly representable values round-trip with the right bits", "[cpu][dtype]") {
    const DType t = DType::fp16;
    CHECK(pa::encode(t, 1.0f) == 0x3c00);
    CHECK(pa::encode(t, -2.0f) == 0xc000);
    CHECK(pa::encode(t, 0.5f) == 0x3800);
    CHECK(pa::encode(t, 0.0f) == 0x0000);
    CHECK(pa::encode(t, -0.0f) == 0x8000);
    CHECK(pa::encode(t, 65504.0f) == 0x7bff);                    // largest finite
    CHECK(pa::encode(t, std::ldexp(1.0f, -14)) == 0x0400);       // smallest normal
    CHECK(pa::encode(t, std::ldexp(1.0f, -24)) == 0x0001);       // smallest subnormal
    CHECK(pa::encode(t, std::ldexp(1023.0f, -24)) == 0x03ff);    // largest subnormal
    CHECK(pa::decode(t, 0x3555) == 0.333251953125f);
    CHECK(pa::round_to(t, 0.1f) == 0.0999755859375f);
    CHECK(std::signbit(pa::decode(t, 0x8000)));
}

TEST_CASE("bf16: exactly representable values round-trip with the right bits", "[cpu][dtype]") {
    const DType t = DType::bf16;
    CHECK(pa::encode(t, 1.0f) == 0x3f80);
    CHECK(pa::encode(t, -2.0f) == 0xc000);
    CHECK(pa::encode(t, 0.0f) == 0x0000);
    CHECK(pa::encode(t, -0.0f) == 0x8000);
    CHECK(pa::encode(t, 3.0f) == 0x4040);
    CHECK(pa::encode(t, std::ldexp(1.0f, -126)) == 0x0080);  // smallest normal
    CHECK(pa::encode(t, std::ldexp(1.0f, -133)) == 0x0001);  // smallest subnormal
    CHECK(pa::decode(t, 0x7f7f) == std::ldexp(255.0f, 120));  // largest finite
    CHECK(pa::round_to(t, 0.1f) == 0.10009765625f);
}

TEST_CASE("round to nearest even at ties, nearest otherwise", "[cpu][dtype]") {
    SECTION("fp16") {
        const DType t = DType::fp16;
        CHECK(pa::encode(t, 1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie, 1.0 is even
        CHECK(pa::encode(t, 1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie, up to even
        CHECK(pa::encode(t, 1.0f + std::ldexp(1.2f, -11)) == 0x3c01);      // above the tie
        CHECK(pa::encode(t, 2049.0f) == 0x6800);                           // 2048 (even)
        CHECK(pa::encode(t, 2051.0f) == 0x6802);                           // 2052 (even)
        CHECK(pa::encode(t, -2051.0f) == 0xe802);
        CHECK(pa::encode(t, 2050.5f) == 0x6801);                           // nearest, 2050
    }
    SECTION("bf16") {
        const DType t = DType::bf16;
        CHECK(pa::encode(t, 1.0f + std::ldexp(1.0f, -8)) == 0x3f80);       // tie, 1.0 is even
        CHECK(pa::encode(t, 1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);   // tie, up to even
        CHECK(pa::encode(t, 257.0f) == 0x4380);                            // 256 (even)
        CHECK(pa::encode(t, 259.0f) == 0x4382);                            // 260 (even)
        CHECK(pa::encode(t, 257.5f) == 0x4381);                            // nearest, 258
        CHECK(pa::encode(t, -259.0f) == 0xc382);
    }
}

TEST_CASE("fp16 subnormals round in units of 2^-24, ties to even", "[cpu][dtype]") {
    const DType t = DType::fp16;
    const float u = std::ldexp(1.0f, -24);
    CHECK(pa::encode(t, 0.5f * u) == 0x0000);   // tie between 0 and 1 unit: 0 is even
    CHECK(pa::encode(t, 0.51f * u) == 0x0001);
    CHECK(pa::encode(t, 1.5f * u) == 0x0002);   // tie: 2 units
    CHECK(pa::encode(t, 2.5f * u) == 0x0002);   // tie: 2 units
    CHECK(pa::encode(t, 2.6f * u) == 0x0003);
    CHECK(pa::encode(t, -1.5f * u) == 0x8002);
    CHECK(pa::encode(t, 1e-9f) == 0x0000);
    CHECK(pa::encode(t, -1e-9f) == 0x8000);
    CHECK(pa::encode(t, std::ldexp(1.0f, -14) - 0.5f * u) == 0x0400);  // tie at the top rounds to the smallest normal
    CHECK(pa::encode(t, FLT_TRUE_MIN) == 0x0000);                     // a float subnormal
    CHECK(pa::decode(t, 0x0001) == u);
    CHECK(pa::decode(t, 0x8003) == -3 * u);
}

TEST_CASE("overflow goes to infinity, infinity stays infinity", "[cpu][dtype]") {
    SECTION("fp16") {
        const DType t = DType::fp16;
        CHECK(pa::encode(t, 65519.0f) == 0x7bff);   // below the tie: largest finite
        CHECK(pa::encode(t, 65520.0f) == 0x7c00);   // the tie rounds to even, which is inf
        CHECK(pa::encode(t, 1e6f) == 0x7c00);
        CHECK(pa::encode(t, -1e6f) == 0xfc00);
        CHECK(pa::encode(t, INFINITY) == 0x7c00);
        CHECK(pa::encode(t, -INFINITY) == 0xfc00);
        CHECK(pa::encode(t, FLT_MAX) == 0x7c00);
        CHECK(std::isinf(pa::decode(t, 0x7c00)));
    }
    SECTION("bf16") {
        const DType t = DType::bf16;
        const float largest = std::ldexp(255.0f, 120);
        CHECK(pa::encode(t, largest) == 0x7f7f);
        CHECK(pa::encode(t, std::nextafter(largest + std::ldexp(1.0f, 119), 0.0f)) == 0x7f7f);  // just below the tie
        CHECK(pa::encode(t, FLT_MAX) == 0x7f80);
        CHECK(pa::encode(t, -FLT_MAX) == 0xff80);
        CHECK(pa::encode(t, INFINITY) == 0x7f80);
        CHECK(pa::encode(t, -INFINITY) == 0xff80);
        CHECK(std::isinf(pa::decode(t, 0x7f80)));
    }
}

TEST_CASE("NaN stays NaN, whatever its sign or payload", "[cpu][dtype]") {
    for (DType t : {DType::fp16, DType::bf16}) {
        INFO(pa::dtype_name(t));
        for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff800001u}) {
            INFO("float bits " << bits);
            const uint16_t h = pa::encode(t, pa::bits_float(bits));
            CHECK(is_nan_bits(t, h));
            CHECK(std::isnan(pa::decode(t, h)));
        }
        CHECK(std::isnan(pa::decode(t, pa::kNaNBits)));  // the poison pattern is NaN in both formats
        CHECK(std::isnan(pa::round_to(t, NAN)));
    }
}

TEST_CASE("every bit pattern: fp16 decodes to its IEEE value, and both formats round-trip", "[cpu][dtype]") {
    long long fp16_value_bad = 0;
    for (uint32_t h = 0; h <= 0xffff; ++h) {
        const uint16_t b = static_cast<uint16_t>(h);
        if (is_nan_bits(DType::fp16, b)) continue;
        const double want = ((b & 0x7c00u) == 0x7c00u) ? ((b & 0x8000u) ? -INFINITY : INFINITY) : fp16_value(b);
        fp16_value_bad += static_cast<double>(pa::decode(DType::fp16, b)) != want;
    }
    CHECK(fp16_value_bad == 0);
    for (DType t : {DType::fp16, DType::bf16}) {
        INFO(pa::dtype_name(t));
        long long bad = 0;
        for (uint32_t h = 0; h <= 0xffff; ++h) {
            const uint16_t b = static_cast<uint16_t>(h);
            if (is_nan_bits(t, b)) continue;
            bad += pa::encode(t, pa::decode(t, b)) != b;
        }
        CHECK(bad == 0);
    }
}

TEST_CASE("every pair of neighbours: the midpoint rounds to the even one, either side of it to the nearer",
          "[cpu][dtype]") {
    for (DType t : {DType::fp16, DType::bf16}) {
        INFO(pa::dtype_name(t));
        long long bad = 0;
        // positive finite patterns a and their successor a + 1 (the largest's successor is inf)
        for (uint32_t a = 0; a < inf_bits(t); ++a) {
            const uint16_t lo = static_cast<uint16_t>(a), hi = static_cast<uint16_t>(a + 1);
            const float x = pa::decode(t, lo);
            // the midpoint, exact in float (fp16 and bf16 have far fewer bits); the step
            // past the largest finite value is the width of its binade's ulp
            const float ulp = hi == inf_bits(t) ? x - pa::decode(t, static_cast<uint16_t>(lo - 1)) : pa::decode(t, hi) - x;
            const float mid = x + 0.5f * ulp;
            const uint16_t even = (lo & 1u) ? hi : lo;
            bad += pa::encode(t, mid) != even;
            bad += pa::encode(t, std::nextafter(mid, 0.0f)) != lo;
            bad += pa::encode(t, std::nextafter(mid, INFINITY)) != hi;
            bad += pa::encode(t, -mid) != (even | 0x8000u);  // symmetric in sign
        }
        CHECK(bad == 0);
    }
}

TEST_CASE("dtype names parse both ways", "[cpu][dtype]") {
    DType t = DType::fp16;
    CHECK(pa::parse_dtype("bf16", &t));
    CHECK(t == DType::bf16);
    CHECK(pa::parse_dtype("fp16", &t));
    CHECK(t == DType::fp16);
    CHECK(!pa::parse_dtype("float16", &t));
    CHECK(!pa::parse_dtype("", &t));
    CHECK(std::string(pa::dtype_name(DType::fp16)) == "fp16");
    CHECK(std::string(pa::dtype_name(DType::bf16)) == "bf16");
}
