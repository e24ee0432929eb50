// The fill-in's answer is the lesson itself: this graded file hands the grader step 3's own
// kernel (../step3_wgmma.cuh) and layout under the names student.cuh uses. The honesty test
// grades it: it must pass, at a speed ratio near 1.
#pragma once

#include <cstdint>

#include "step3_wgmma.cuh"

namespace ex_fill {

using lesson06::step3::core_offset_bytes;
using lesson06::step3::kNB;
using lesson06::step3::kRows;
using lesson06::step3::kSmemBytes;
using lesson06::step3::kThreads;

template <class Policy>
inline constexpr auto wgmma_prefill_kernel = &lesson06::step3::wgmma_prefill_kernel<Policy>;

// Step 3 builds its descriptors with sm90::make_smem_desc (hopper.cuh), a device function of
// a pointer; these are its fields without swizzle, on the shared address, for the host check.
__host__ __device__ constexpr uint64_t smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16 |
           static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
}

}  // namespace ex_fill
