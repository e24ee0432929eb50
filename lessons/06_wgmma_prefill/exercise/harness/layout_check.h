// The fill-in's layout checks, plain C++ (the grader runs them on the host before any launch;
// the CPU tests prove them without a GPU): step 3's core-matrix offset and descriptor fields,
// and a check of a student's pair against them that names the usual mistakes in one line.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace lesson06_exercise {

using CoreOffsetFn = std::function<int(int row, int d)>;
using SmemDescFn = std::function<uint64_t(uint32_t addr, uint32_t lbo, uint32_t sbo)>;

inline std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt(const char* f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

// Step 3's core_offset_bytes (../../step3_wgmma.cuh): element (row, d) of a [rows][128] bf16 tile.
inline int lesson_core_offset(int row, int d) { return ((row / 8) * 1024 + (d / 8) * 64 + (row % 8) * 8 + d % 8) * 2; }
// hopper.cuh's make_smem_desc without swizzle, on the address instead of the pointer
inline uint64_t lesson_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16 |
           static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
}

// The fill-in's two functions against step 3's: every (row, d) of a 128 x 128 tile, and the
// descriptor of every 16-byte shared address with the offsets the kernel uses (K and Q, V) and
// one more pair. One line per wrong function (empty: both right).
inline std::vector<std::string> fill_layout_errors(const CoreOffsetFn& core, const SmemDescFn& desc) {
    std::vector<std::string> errors;
    // core_offset_bytes (TODO(1)): every element of a 128 x 128 tile
    int wrong = 0, first_row = 0, first_d = 0;
    bool row_major = true;
    for (int row = 0; row < 128; ++row)
        for (int d = 0; d < 128; ++d) {
            const int got = core(row, d);
            if (got != (row * 128 + d) * 2) row_major = false;
            if (got != lesson_core_offset(row, d) && wrong++ == 0) {
                first_row = row;
                first_d = d;
            }
        }
    if (wrong > 0) {
        if (row_major)
            errors.push_back("core_offset_bytes lays the tile out row-major ([row][d], 256-byte rows): wgmma reads 8 x 8 "
                             "core matrices, each 8 rows of 16 bytes stored as 128 contiguous bytes");
        else
            errors.push_back(fmt("core_offset_bytes(%d, %d) = %d bytes, expected %d (%d of the 16384 elements of a "
                                      "128 x 128 tile are misplaced)",
                                      first_row, first_d, core(first_row, first_d), lesson_core_offset(first_row, first_d), wrong));
    }
    // smem_desc (TODO(2)): every 16-byte shared address, with the offsets of K (and Q) and of V
    const uint32_t offsets[][2] = {{128, 2048}, {2048, 128}, {16, 4096}};
    bool swapped = true, unshifted = true, ok = true;
    uint32_t bad_addr = 0, bad_lbo = 0, bad_sbo = 0;
    for (const auto& o : offsets)
        for (uint32_t addr = 0; addr < (1u << 18); addr += 16) {
            const uint64_t got = desc(addr, o[0], o[1]);
            if (got == lesson_desc(addr, o[0], o[1])) continue;
            if (ok) {
                bad_addr = addr;
                bad_lbo = o[0];
                bad_sbo = o[1];
            }
            ok = false;
            if (got != lesson_desc(addr, o[1], o[0])) swapped = false;
            if ((got & 0x3FFF) != (addr & 0x3FFF)) unshifted = false;  // bits 0-13: the address itself
        }
    if (!ok) {
        if (swapped)
            errors.push_back("smem_desc: LBO and SBO are swapped (bits 16-29 hold the leading-dimension byte offset, bits "
                             "32-45 the stride-dimension one)");
        else if (unshifted)
            errors.push_back("smem_desc: the start address is not shifted right by 4 (bits 0-13 hold the address in units "
                             "of 16 bytes)");
        else
            errors.push_back(fmt("smem_desc(0x%05x, LBO %u, SBO %u) = 0x%016llx, expected 0x%016llx", bad_addr, bad_lbo,
                                      bad_sbo, static_cast<unsigned long long>(desc(bad_addr, bad_lbo, bad_sbo)),
                                      static_cast<unsigned long long>(lesson_desc(bad_addr, bad_lbo, bad_sbo))));
    }
    return errors;
}


}  // namespace lesson06_exercise
