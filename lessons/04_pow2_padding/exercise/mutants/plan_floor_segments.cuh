// Mutant (known wrong) of the plan exercise: ctx / partition_size rounds down, so the last,
// partly filled partition of a context is lost (and a context shorter than one partition gets
// none).
// The grader must fail it (exit code 1) and print (a regular expression): rounds down, but a partly filled partition is a segment too
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
        const int segments = ctx / partition_size;
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
