// Mutant (known wrong) of the fill-in exercise, TODO(1): on fan-out every decode rank reads the
// writer's heads from 0, so the decode ranks sharing one writer all get its first heads.
// The grader must fail it (exit code 1) and print (a regular expression): would land where the decode rank keeps head
#pragma once

#include <string>

#include "staging_plan.h"
#include "staging_ring.h"

namespace ex_fill {

using lesson07::HeadSlice;
using lesson07::heads_per_rank;
using lesson07::PlanError;
using lesson07::RankHeads;
using lesson07::readers_per_writer;
using lesson07::replication;
using lesson07::RingAllocation;
using lesson07::TpConfig;
using lesson07::validate;
using lesson07::Watermark;
using lesson07::writers_per_reader;

// The global KV heads [first, first + count) that `rank` of a TP-`tp` group holds. With
// more ranks than heads, neighbouring ranks share a head (TP 4, 2 heads: ranks 0,1 hold
// head 0 and ranks 2,3 head 1).
inline RankHeads rank_heads(int tp, int rank, int kv_heads) {
    if (rank < 0 || rank >= tp) throw PlanError("rank " + std::to_string(rank) + " is outside TP " + std::to_string(tp));
    const int hpr = heads_per_rank(tp, kv_heads);
    return {(rank / replication(tp, kv_heads)) * hpr, hpr};
}

// The slice prefill rank `src_rank` sends to decode rank `dst_rank`, in local head indices of
// each pool: heads [src_head_start, + num_heads) of the prefill rank's pool land at
// [dst_head_start, + num_heads) of the decode rank's pool.
inline HeadSlice head_slice(const TpConfig& tp, int src_rank, int dst_rank) {
    validate(tp);
    if (src_rank < 0 || src_rank >= tp.prefill_tp)
        throw PlanError("prefill rank " + std::to_string(src_rank) + " is outside TP " + std::to_string(tp.prefill_tp));
    if (dst_rank < 0 || dst_rank >= tp.decode_tp)
        throw PlanError("decode rank " + std::to_string(dst_rank) + " is outside TP " + std::to_string(tp.decode_tp));
    const int src_hpr = heads_per_rank(tp.prefill_tp, tp.kv_heads), src_rep = replication(tp.prefill_tp, tp.kv_heads);
    const int dst_hpr = heads_per_rank(tp.decode_tp, tp.kv_heads), dst_rep = replication(tp.decode_tp, tp.kv_heads);
    (void)dst_rep;
    HeadSlice s;
    if (tp.prefill_tp > tp.decode_tp) {
        if (src_rank / writers_per_reader(tp) != dst_rank)
            throw PlanError("prefill rank " + std::to_string(src_rank) + " does not write to decode rank " + std::to_string(dst_rank));
        s.src_head_start = 0;
        s.num_heads = src_hpr;
        s.dst_head_start = (src_rank / src_rep) * src_hpr % dst_hpr;
    } else {
        if (dst_rank / readers_per_writer(tp) != src_rank)
            throw PlanError("prefill rank " + std::to_string(src_rank) + " does not write to decode rank " + std::to_string(dst_rank));
        s.src_head_start = 0;
        s.num_heads = dst_hpr;
        s.dst_head_start = 0;
    }
    return s;
}

// The prefill side's check before writing allocation `a` (round a.round, bytes [a.offset,
// a.end())), given the last watermark it received: (round, offset) of the oldest allocation
// the decode side still holds live.
inline bool prefill_may_write(const RingAllocation& a, const Watermark& wm) {
    if (a.round == 0) return true;  // the first lap overwrites nothing
    const int64_t previous = a.round - 1;  // the lap whose bytes this write replaces
    return previous < wm.round || (previous == wm.round && a.end() <= wm.tail);
}

}  // namespace ex_fill
