// Mutant (known wrong) of the plan exercise: first[] advances by each sequence's segments once,
// forgetting that every one of its H heads holds that many entries.
// The grader must fail it (exit code 1) and print (a regular expression): each sequence holds its [0-9]+ heads' segments
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
        entries += segments;
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
