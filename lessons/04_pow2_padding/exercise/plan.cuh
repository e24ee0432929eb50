// Lesson 04, exercise 2 (extension, graded on the CPU: no GPU needed): the ragged scratch.
//
// Lesson 04's scratch gives every sequence of a batch the longest sequence's segment count
// (pow2_lanes), or its next power of two (pad_scratch). Lay it out ragged instead: sequence b
// holds exactly the segments its own context needs, and the reduce's lanes past them are
// masked, as in the lesson. Plan it on the host:
//
//   segments[b]   the segments (partitions of partition_size tokens) of context_lens[b]
//                 (a context of 0 tokens, a finished sequence, holds none)
//   first[b]      where sequence b's entries start: its head h, segment s is the entry
//                 first[b] + h * segments[b] + s; first[0] = 0 and first[B] counts every entry
//   segments_p2   the reduce's lane width: the smallest power of two holding every sequence's
//                 segments (1 when no sequence has any)
//   bytes         the ragged scratch: each entry is m, l and D floats of acc
//   padded_bytes  pad_scratch's scratch for the same batch: B * H * segments_p2 entries
//
// The grader prints how much of pad_scratch's memory the ragged layout keeps. Plain C++.
// Grade: lesson04_exercise --grade --exercise plan   (exercise/README.md)
#pragma once

#include <vector>

#include "exercise/harness/plan_grader.h"

namespace ex_plan {

inline lesson04_exercise::RaggedScratch plan_ragged(const std::vector<int>& context_lens, int H, int D,
                                                    int partition_size) {
    lesson04_exercise::RaggedScratch r;
    // TODO(1) (about 6 lines): segments[b] for every sequence, and first[0 .. B].
    (void)context_lens;
    (void)H;
    (void)partition_size;
    // TODO(2) (about 4 lines): segments_p2, bytes and padded_bytes (the largest batch the
    // grader plans needs more than 10^11 bytes).
    (void)D;
    return r;
}

}  // namespace ex_plan
