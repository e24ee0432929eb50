// Storage dtypes (fp16, bf16) as raw 16-bit patterns on the host.
//
// Host code never needs cuda_fp16.h: the conversions below are plain C++ so that
// reference/ and the CPU tests build on a machine without nvcc. Rounding is
// round-to-nearest-even, the same as __float2half_rn / __float2bfloat16_rn.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace pa {

enum class DType { fp16, bf16 };

inline const char* dtype_name(DType t) { return t == DType::fp16 ? "fp16" : "bf16"; }

// Returns false when `s` names no dtype.
inline bool parse_dtype(const std::string& s, DType* out) {
    if (s == "fp16") { *out = DType::fp16; return true; }
    if (s == "bf16") { *out = DType::bf16; return true; }
    return false;
}

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t float_to_bf16_bits(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                      // round to nearest even
    return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_fp16_bits(float f) {
    const uint32_t u = float_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // overflow -> inf
    if (absu < 0x38800000u) {                                               // fp16 subnormal or 0
        // value = absu as float; fp16 subnormal unit is 2^-24
        const float a = bits_float(absu);
        const float scaled = a * 16777216.0f;  // exact: multiply by 2^24
        // round half to even on an integer in [0, 1024]
        float r = static_cast<float>(static_cast<int>(scaled));
        const float frac = scaled - r;
        if (frac > 0.5f || (frac == 0.5f && (static_cast<int>(r) & 1))) r += 1.0f;
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
    }
    // normal: rebias exponent 127 -> 15, keep 10 mantissa bits, round to nearest even
    uint32_t mant = absu & 0x7fffffu;
    uint32_t exp = (absu >> 23) - 127 + 15;
    uint32_t half = (exp << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1;  // may carry into exponent: correct
    return static_cast<uint16_t>(sign | half);
}

inline float fp16_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24
        const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
    return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline uint16_t encode(DType t, float f) {
    return t == DType::fp16 ? float_to_fp16_bits(f) : float_to_bf16_bits(f);
}
inline float decode(DType t, uint16_t h) {
    return t == DType::fp16 ? fp16_bits_to_float(h) : bf16_bits_to_float(h);
}
// The value a float becomes once stored in `t`.
inline float round_to(DType t, float f) { return decode(t, encode(t, f)); }

// A quiet NaN in either format (the bit pattern is the same for both: all ones).
constexpr uint16_t kNaNBits = 0xffffu;

}  // namespace pa
