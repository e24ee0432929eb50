// Mutant (known wrong) of the plan exercise: the sizes are computed in 32-bit ints: right for
// every ordinary batch, wrapped for the largest (over 10^11 bytes).
// The grader must fail it (exit code 1) and print (a regular expression): overflowed a 32-bit int
#pragma once

#include <vector>

#include "exercise/harness/plan_grader.h"

namespace ex_plan {

inline lesson04_exercise::RaggedScratch plan_ragged(const std::vector<int>& context_lens, int H, int D,
                                                    int partition_size) {
    lesson04_exercise::RaggedScratch r;
    long long entries = 0;
    int longest = 0;
    r.first.push_back(0);
    for (int ctx : context_lens) {
        const int segments = (ctx + partition_size - 1) / partition_size;  // a partly filled partition counts
        r.segments.push_back(segments);
        entries += static_cast<long long>(H) * segments;
        r.first.push_back(entries);
        longest = segments > longest ? segments : longest;
    }
    r.segments_p2 = 1;
    while (r.segments_p2 < longest) r.segments_p2 *= 2;
    const long long entry_bytes = static_cast<long long>(sizeof(float)) * (2 + D);  // m, l, acc[D]
    const int bytes = static_cast<int>(entries * entry_bytes);  // an int holds up to 2^31 - 1
    const int padded_bytes = static_cast<int>(static_cast<long long>(context_lens.size()) * H * r.segments_p2 * entry_bytes);
    r.bytes = bytes;
    r.padded_bytes = padded_bytes;
    return r;
}

}  // namespace ex_plan
