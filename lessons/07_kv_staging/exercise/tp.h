// Lesson 07, exercise 2 (extension): decode TP larger than the KV heads.
//
// THIS is the file you edit (the rest of exercise/ is the grader). With Pd > heads, each
// decode rank holds one KV head, and Pd / heads decode ranks hold the same one (TP 8 with 2
// heads: ranks 0-3 hold head 0, ranks 4-7 head 1). Every decode rank must receive its head
// exactly once. When the prefill side is replicated too (Ps > heads), several prefill ranks
// hold that head: exactly one of them sends it, and the sends of one head are spread evenly
// over the prefill ranks that hold it: replica j (0-based, among the decode ranks of the head)
// is sent by replica j * rep_p / rep_d (among the prefill ranks of the head), where rep_p and
// rep_d are the two sides' replications. The lesson's plan (make_transfer_plan) does not do
// this: with Ps > Pd > heads, every writer of a decode rank sends the same head again.
//
//   TODO(1)  the head of decode rank d, its sender and the head's index there   about 5 lines
//   TODO(2)  the bytes of each send, of each prefill rank, and in total          about 3 lines
//
// Grade it: lesson07_exercise --grade --exercise tp   (no GPU; hints: exercise/hints/tp/1.md ..)
// The grader calls replicated_plan with a valid TpConfig (validate() passes) whose decode TP
// exceeds its KV heads; a head's chunk is K and V of `layers` layers and `tokens` tokens, rows
// of kHeadDim elements of kElemBytes bytes (staging_plan.h).
#pragma once

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
        // TODO(1) (about 5 lines): s.head, s.src_rank and s.src_head of decode rank d.
        // TODO(2) (about 3 lines): s.bytes, and add it to plan.bytes_sent and plan.total_bytes.
        plan.sends.push_back(s);
    }
    (void)layers;
    (void)tokens;
    (void)rep_d;
    (void)rep_p;
    (void)hpr_p;
    return plan;
}

}  // namespace ex_tp
