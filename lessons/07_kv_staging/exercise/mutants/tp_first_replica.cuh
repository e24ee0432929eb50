// Mutant (known wrong) of the extension exercise: the first prefill rank holding a head sends it
// to every decode replica; the data is right, but one prefill rank does all of the head's sends
// while its replicas idle.
// The grader must fail it (exit code 1) and print (a regular expression): not spread over the prefill ranks
#pragma once

#include <cstdint>

#include "staging_plan.h"
#include "tp_plan.h"

namespace ex_tp {

inline lesson07_exercise::ReplicatedPlan replicated_plan(const lesson07::TpConfig& tp, int layers, int tokens) {
    lesson07_exercise::ReplicatedPlan plan;
    plan.bytes_sent.assign(tp.prefill_tp, 0);
    const int rep_d = lesson07::replication(tp.decode_tp, tp.kv_heads);    // decode ranks per head (> 1 here)
    const int rep_p = lesson07::replication(tp.prefill_tp, tp.kv_heads);   // prefill ranks per head (1 if Ps <= heads)
    const int hpr_p = lesson07::heads_per_rank(tp.prefill_tp, tp.kv_heads);  // heads per prefill rank
    for (int d = 0; d < tp.decode_tp; ++d) {
        lesson07_exercise::ReplicaSend s;
        s.dst_rank = d;
        s.head = d / rep_d;                         // rank / replication, never rank % heads
        const int replica = d % rep_d;              // which of the head's decode ranks this is
        const int first = (s.head / hpr_p) * rep_p;  // the first prefill rank holding the head
        s.src_rank = first;
        (void)replica;
        s.src_head = s.head % hpr_p;
        // K and V, every layer, every token, one head: in 64 bits (tens of GiB are possible).
        s.bytes = 2 * int64_t{layers} * tokens * lesson07::kHeadDim * lesson07::kElemBytes;
        plan.bytes_sent[s.src_rank] += s.bytes;
        plan.total_bytes += s.bytes;
        plan.sends.push_back(s);
    }
    return plan;
}

}  // namespace ex_tp
