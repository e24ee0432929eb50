// The split-k scratch of a batch laid out ragged (lesson 04's plan exercise): each sequence
// holds exactly the segments (partitions) its own context needs, instead of every sequence
// holding the batch's longest count (lesson 04's pow2_lanes) or its next power of two (lesson
// 04's pad_scratch). Plain C++; computed by walking the partitions one by one, so that it shares
// no formula with the ceil / next-power-of-two arithmetic the exercise asks for.
//
// Layout: sequence b's entries start at first[b]; its head h, segment s is entry
// first[b] + h * segments[b] + s; first[B] is the number of entries. One entry is m, l and D
// floats of acc.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pa::reference {

struct RaggedScratchRef {
    std::vector<int> segments;     // [B]
    std::vector<long long> first;  // [B + 1]
    int segments_p2 = 1;           // the reduce's lane width: a power of two >= every segments[b]
    long long bytes = 0;           // the ragged scratch
    long long padded_bytes = 0;    // pad_scratch's: B * H * segments_p2 entries
};

// context_lens[b] >= 0 (0: a sequence with no context holds no segment), H >= 1, D >= 1,
// partition_size >= 1.
inline RaggedScratchRef ragged_scratch(const std::vector<int>& context_lens, int H, int D, int partition_size) {
    RaggedScratchRef r;
    const long long entry_bytes = static_cast<long long>(sizeof(float)) * (2LL + D);
    r.first.push_back(0);
    int longest = 0;
    for (int ctx : context_lens) {
        int count = 0;
        for (long long begin = 0; begin < ctx; begin += partition_size) ++count;  // a partition starts at `begin`
        r.segments.push_back(count);
        r.first.push_back(r.first.back() + static_cast<long long>(H) * count);
        longest = std::max(longest, count);
    }
    while (r.segments_p2 < longest) r.segments_p2 *= 2;
    r.bytes = r.first.back() * entry_bytes;
    r.padded_bytes = static_cast<long long>(context_lens.size()) * H * r.segments_p2 * entry_bytes;
    return r;
}

}  // namespace pa::reference
