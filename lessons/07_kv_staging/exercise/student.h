// Lesson 07, exercise 1 (fill-in): which heads go where, and may the writer write yet.
//
// THIS is the file you edit (the rest of exercise/ is the grader). It holds three of lesson
// 07's host functions, copied from staging_plan.cpp and staging_ring.cpp with their key lines
// cut out; the lesson's other helpers (heads_per_rank, replication, writers_per_reader,
// readers_per_writer, validate) are yours to call.
//
//   TODO(1)  rank_heads: the first global head of a rank                 about 2 lines
//            head_slice: the fan-in landing and the fan-out source start  about 2 lines
//   TODO(2)  prefill_may_write: the watermark check before writing        about 3 lines
//
// Grade it: lesson07_exercise --grade   (no GPU needed; hints: exercise/hints/fill/1.md, 2.md, 3.md)
// Keep the functions' names and arguments: the grader calls them over every (Ps, Pd, KV heads,
// rank) up to TP 16, over TP pairs drawn from --seed, and over seeded allocate/free traces of
// the lesson's own ring.
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
    // TODO(1) (about 2 lines): the first global head of `rank`; `hpr` heads from there.
    (void)hpr;
    return {0, 0};
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
    HeadSlice s;
    if (tp.prefill_tp > tp.decode_tp) {
        if (src_rank / writers_per_reader(tp) != dst_rank)
            throw PlanError("prefill rank " + std::to_string(src_rank) + " does not write to decode rank " + std::to_string(dst_rank));
        s.src_head_start = 0;
        s.num_heads = src_hpr;
        // TODO(1) (about 1 line): where the writer's heads land in the decode rank's pool.
        s.dst_head_start = 0;
    } else {
        if (dst_rank / readers_per_writer(tp) != src_rank)
            throw PlanError("prefill rank " + std::to_string(src_rank) + " does not write to decode rank " + std::to_string(dst_rank));
        // TODO(1) (about 1 line): where the reader's heads start in the prefill rank's pool.
        s.src_head_start = 0;
        s.num_heads = dst_hpr;
        s.dst_head_start = 0;
    }
    (void)src_rep;
    (void)dst_rep;
    return s;
}

// The prefill side's check before writing allocation `a` (round a.round, bytes [a.offset,
// a.end())), given the last watermark it received: (round, offset) of the oldest allocation
// the decode side still holds live.
inline bool prefill_may_write(const RingAllocation& a, const Watermark& wm) {
    // TODO(2) (about 3 lines): true when the bytes `a` overwrites have all been freed.
    (void)a;
    (void)wm;
    return false;
}

}  // namespace ex_fill
