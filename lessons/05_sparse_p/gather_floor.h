// Lesson 05's measured floor: how long a kernel takes that reads exactly the rows a step
// must read, at their places in the paged pools, and does nothing else. The byte model's
// limit assumes a sparse step reads its bytes at the dense kernel's rate; the plain reads
// (plain_read_us, needed_read_us) read as many bytes contiguously. These gathers read the
// same rows as the kernels: K and V pages of 4 KiB, and with compaction V rows of 256 bytes
// scattered over those pages.
#pragma once

#include <cstdint>
#include <vector>

#include "paged_cache.h"

namespace lesson05 {

constexpr int kGatherMaxBlockSize = 32;  // a page's rows are a 32-bit mask

struct GatherFloor {
    double dense_us = 0;   // every K and V row of every sequence
    double needed_us = 0;  // every K row, and the V rows some query head of the group uses
};

// Times both gathers on the problem's block table and pools (fresh device copies, L2-cold,
// timed like the kernels), each the fastest of three ways to issue it. `row_used` is
// Sparsity::row_used ([B][Hkv][max_ctx]). D 128 and pages of at most 32 tokens (what the
// lesson's kernels run); throws std::invalid_argument otherwise.
GatherFloor time_gather_floor(const pa::DecodeProblem& p, const std::vector<uint8_t>& row_used, int max_ctx);

}  // namespace lesson05
