// Mutant (known wrong) of the extension exercise: the lesson's own plan (make_transfer_plan), one
// send per (writer, reader) pair; with Ps > Pd > heads every writer of a decode rank holds its
// head and sends it, so a decode rank receives its head several times.
// The grader must fail it (exit code 1) and print (a regular expression): receives its head [0-9]+ times
#pragma once

#include "staging_plan.h"
#include "tp_plan.h"

namespace ex_tp {

inline lesson07_exercise::ReplicatedPlan replicated_plan(const lesson07::TpConfig& tp, int layers, int tokens) {
    const lesson07::TransferPlan lp = lesson07::make_transfer_plan(tp, layers, tokens);
    lesson07_exercise::ReplicatedPlan plan;
    plan.bytes_sent.assign(tp.prefill_tp, 0);
    for (const lesson07::TransferPair& p : lp.pairs) {  // reader-major
        lesson07_exercise::ReplicaSend s;
        s.dst_rank = p.dst_rank;
        s.head = lesson07::rank_heads(tp.decode_tp, p.dst_rank, tp.kv_heads).first + p.slice.dst_head_start;
        s.src_rank = p.src_rank;
        s.src_head = p.slice.src_head_start;
        s.bytes = p.bytes;
        plan.bytes_sent[s.src_rank] += s.bytes;
        plan.total_bytes += s.bytes;
        plan.sends.push_back(s);
    }
    return plan;
}

}  // namespace ex_tp
