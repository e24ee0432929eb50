// The answer type of exercise 2 (tp.h): a hand-off to a decode server whose TP size exceeds
// the model's KV heads, so that each decode rank holds one head that Pd / heads - 1 other
// decode ranks hold too. Read-only: the grader compares these fields.
#pragma once

#include <cstdint>
#include <vector>

namespace lesson07_exercise {

// One chunk: prefill rank `src_rank` sends global head `head`, which sits at local index
// `src_head` of its pool, to decode rank `dst_rank` (where it is the one head, local 0):
// K and V of every layer and token, `bytes` bytes.
struct ReplicaSend {
    int dst_rank = 0;
    int head = 0;
    int src_rank = 0;
    int src_head = 0;
    int64_t bytes = 0;
};

struct ReplicatedPlan {
    std::vector<ReplicaSend> sends;  // one per decode rank, in decode-rank order
    std::vector<int64_t> bytes_sent;  // [Ps] bytes each prefill rank sends, all its chunks together
    int64_t total_bytes = 0;          // every chunk once
};

}  // namespace lesson07_exercise
