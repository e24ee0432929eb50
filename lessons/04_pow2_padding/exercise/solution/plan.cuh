// Lesson 04, exercise 2's reference solution (the ragged scratch's plan). Teachers: remove
// solution/ before handing the folder out; the grader does not need it.
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
    r.bytes = entries * entry_bytes;
    r.padded_bytes = static_cast<long long>(context_lens.size()) * H * r.segments_p2 * entry_bytes;
    return r;
}

}  // namespace ex_plan
