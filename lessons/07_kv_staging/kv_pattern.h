// The values lesson 07's checks put in the KV pools: every element is a 16-bit hash of
// where it belongs, so a copy that moves anything to the wrong place (wrong layer, K
// for V, wrong head, token or element, another request's data) reads back wrong.
//
//   kv_value(request, layer, kv, head, token, d)   a request's K (kv 0) or V (kv 1);
//                                                   head is the model's global KV head
//   background(salt, layer_kv, block, head, slot, d)  what every other slot of a pool
//                                                   holds: pages no request owns, the
//                                                   tail of a last page, cached-prefix
//                                                   pages the hand-off must not touch
// The comparison is of the 16 bits, so the check is bit-exact; the values are not meant
// as numbers (some are NaN as bf16), they are never computed with.
// Plain C++ and CUDA: the fill and check kernels and the host-side tests share it.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define L07_HD __host__ __device__ __forceinline__
#else
#define L07_HD inline
#endif

namespace lesson07 {

L07_HD uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

L07_HD uint16_t kv_value(uint32_t request, int layer, int kv, int head, int token, int d) {
    uint32_t h = mix32(request * 0x9e3779b9u + static_cast<uint32_t>(token));
    h = mix32(h ^ (static_cast<uint32_t>(layer * 2 + kv) << 16 | static_cast<uint32_t>(head)));
    return static_cast<uint16_t>(mix32(h + static_cast<uint32_t>(d)) & 0xffffu);
}

// Salts start far above any request id, so background never equals a request's key.
constexpr uint32_t kBackgroundSalt = 0x40000000u;

L07_HD uint16_t background(uint32_t salt, int layer_kv, int block, int head, int slot, int d) {
    uint32_t h = mix32((kBackgroundSalt + salt) * 0x85ebca6bu + static_cast<uint32_t>(block));
    h = mix32(h ^ (static_cast<uint32_t>(layer_kv) << 16 | static_cast<uint32_t>(head) << 8 | static_cast<uint32_t>(slot)));
    return static_cast<uint16_t>(mix32(h + static_cast<uint32_t>(d) + 0x27d4eb2fu) & 0xffffu);
}

}  // namespace lesson07
