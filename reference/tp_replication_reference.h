// CPU reference of a KV hand-off to a decode server whose TP size exceeds the model's KV
// heads (lesson 07's exercise 2): every decode rank holds one head, shared with the other
// Pd / heads - 1 decode ranks, and must receive it exactly once; when the prefill side holds a
// head on several ranks, the head's sends are spread over them (decode replica j is sent by
// prefill replica j * rep_p / rep_d). Plain C++, computed from first principles: each rank's
// heads are enumerated as ranges of the head axis cut into `tp` equal parts, the holders of a
// head are found by search, not by the lesson's rank / replication formulas.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace pa::reference {

struct ReplicaSendRef {
    int dst_rank = 0;
    int head = 0;      // global KV head
    int src_rank = 0;  // the prefill rank that sends it
    int src_head = 0;  // its index in that rank's pool
    int64_t bytes = 0;
};

// The heads [first, last) of `rank` when `heads` heads are cut into `tp` equal parts; a part
// narrower than one head (tp > heads) is the head it falls in.
inline void tp_rank_head_range(int tp, int heads, int rank, int* first, int* last) {
    const int64_t lo = int64_t{rank} * heads / tp, hi = int64_t{rank + 1} * heads / tp;
    *first = static_cast<int>(lo);
    *last = static_cast<int>(hi > lo ? hi : lo + 1);
}

// One send per decode rank, in decode-rank order. head_bytes: K and V of one head, all layers
// and tokens. Throws std::invalid_argument unless Pd > heads and each side's ranks and heads
// split evenly (the shapes lesson 07 validates).
inline std::vector<ReplicaSendRef> replicated_handoff(int Ps, int Pd, int heads, int64_t head_bytes) {
    if (heads < 1 || Ps < 1 || Pd <= heads || Pd % heads != 0 || (Ps <= heads ? heads % Ps : Ps % heads) != 0)
        throw std::invalid_argument("replicated_handoff: needs Pd > heads, Pd % heads == 0, and Ps and heads dividing");
    std::vector<std::vector<int>> prefill_holders(heads), decode_holders(heads);
    for (int p = 0; p < Ps; ++p) {
        int f = 0, l = 0;
        tp_rank_head_range(Ps, heads, p, &f, &l);
        for (int h = f; h < l; ++h) prefill_holders[h].push_back(p);
    }
    for (int d = 0; d < Pd; ++d) {
        int f = 0, l = 0;
        tp_rank_head_range(Pd, heads, d, &f, &l);
        if (l != f + 1) throw std::logic_error("replicated_handoff: a decode rank holds more than one head");
        decode_holders[f].push_back(d);
    }
    std::vector<ReplicaSendRef> out;
    for (int d = 0; d < Pd; ++d) {
        ReplicaSendRef s;
        s.dst_rank = d;
        for (int h = 0; h < heads; ++h)
            for (size_t j = 0; j < decode_holders[h].size(); ++j)
                if (decode_holders[h][j] == d) {
                    s.head = h;
                    const std::vector<int>& src = prefill_holders[h];
                    s.src_rank = src[j * src.size() / decode_holders[h].size()];
                }
        int f = 0, l = 0;
        tp_rank_head_range(Ps, heads, s.src_rank, &f, &l);
        s.src_head = s.head - f;
        s.bytes = head_bytes;
        out.push_back(s);
    }
    return out;
}

}  // namespace pa::reference
