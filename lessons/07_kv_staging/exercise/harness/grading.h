// Lesson 07's exercise graders, the checks themselves: which cases, what each compares, and the
// one line that names a wrong answer. Header-only and plain C++, so that the grader executable
// (harness.cpp) and the CPU tests (tests/test_exercise_lesson07.cpp) run the very same checks.
//
//   fill, TODO(1): rank_heads and head_slice over every valid (Ps, Pd, heads) up to TP 16, the
//                  lesson's own shapes and TP pairs drawn from the seed, against the lesson's
//                  functions, every rank and every (writer, reader) pair.
//   fill, TODO(2): prefill_may_write on allocate/free traces of the lesson's own ring (scripted:
//                  wraps, the empty ring, a whole-ring request; and drawn from the seed), asked
//                  for every allocation not yet written after every step, and on a grid of
//                  (round, bytes, watermark).
//   tp:            the replicated plan against pa::reference::replicated_handoff and its
//                  invariants (each decode rank receives its own head once; total bytes =
//                  replication x heads x head bytes).
#pragma once

#include <algorithm>
#include <exception>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "staging_plan.h"
#include "staging_ring.h"
#include "table.h"
#include "tp_plan.h"
#include "tp_replication_reference.h"

namespace lesson07_exercise {

using lesson07::TpConfig;

// The graded functions of exercise 1; an unset one means this build has no fill exercise.
struct FillFunctions {
    std::function<lesson07::RankHeads(int, int, int)> rank_heads;
    std::function<lesson07::HeadSlice(const TpConfig&, int, int)> head_slice;
    std::function<bool(const lesson07::RingAllocation&, const lesson07::Watermark&)> may_write;
};
using TpFunction = std::function<ReplicatedPlan(const TpConfig&, int, int)>;

// One graded case: a name for its line and the JSON, why it exists, and its data.
struct HostCase {
    std::string name, group, teaches;
    TpConfig tp;
    int layers = 2, tokens = 17;
    // Ring traces: capacity, alignment, and the steps (> 0: allocate that many bytes; 0: free
    // the oldest written allocation; -1: free the newest), or `random_steps` drawn from `seed`.
    int64_t capacity = 0, alignment = 256;
    std::vector<int64_t> steps;
    int random_steps = 0;
    uint64_t seed = 0;
    bool ring_grid = false;  // the (round, bytes, watermark) grid instead of a trace
};

inline std::string tp_label(const TpConfig& t) {
    return pa::strf("tp%dto%d-kv%d", t.prefill_tp, t.decode_tp, t.kv_heads);
}

inline bool valid_tp(const TpConfig& t) {
    try {
        lesson07::validate(t);
        return true;
    } catch (const lesson07::PlanError&) {
        return false;
    }
}

inline std::string plan_teaches(const TpConfig& t) {
    if (t.prefill_tp > t.kv_heads || t.decode_tp > t.kv_heads)
        return "more ranks than heads: neighbouring ranks share a head (rank / replication)";
    if (t.prefill_tp > t.decode_tp) return "fan-in: several prefill ranks write into one decode rank";
    if (t.prefill_tp < t.decode_tp) return "fan-out: one prefill rank writes into several decode ranks";
    return "equal TP: rank r sends its own heads to rank r";
}

// A valid TpConfig drawn from `rng`: heads, then each side a divisor or a multiple of them.
inline TpConfig draw_tp(std::mt19937_64& rng, bool decode_above_heads) {
    static const int kHeads[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32};
    for (;;) {
        TpConfig t;
        t.kv_heads = kHeads[rng() % (sizeof(kHeads) / sizeof(kHeads[0]))];
        auto side = [&](bool above) {
            if (above || rng() % 2) return t.kv_heads * static_cast<int>(2 + rng() % 4);  // replicated
            std::vector<int> divisors;
            for (int d = 1; d <= t.kv_heads; ++d)
                if (t.kv_heads % d == 0) divisors.push_back(d);
            return divisors[rng() % divisors.size()];
        };
        t.prefill_tp = side(false);
        t.decode_tp = side(decode_above_heads);
        if (valid_tp(t)) return t;
    }
}

// Exercise 1, TODO(1): the lesson's shapes, every valid pair up to TP 16, and 12 from the seed.
inline std::vector<HostCase> plan_cases(uint64_t seed) {
    std::vector<HostCase> out;
    std::vector<std::string> seen;
    auto add = [&](const TpConfig& t, const std::string& group, const std::string& name, const std::string& teaches) {
        HostCase c;
        c.name = name;
        c.group = group;
        c.tp = t;
        c.teaches = teaches;
        out.push_back(c);
    };
    std::vector<lesson07::StagingShape> shapes = lesson07::check_shapes();
    for (const auto& s : lesson07::bench_shapes()) shapes.push_back(s);
    for (const auto& s : shapes) {
        const std::string n = tp_label(s.tp);
        if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
        seen.push_back(n);
        add(s.tp, "catalogue", n, "a TP pair of the lesson's own check and table: " + plan_teaches(s.tp));
    }
    for (int heads : {1, 2, 3, 4, 6, 8, 16})
        for (int ps : {1, 2, 3, 4, 6, 8, 12, 16})
            for (int pd : {1, 2, 3, 4, 6, 8, 12, 16}) {
                const TpConfig t{ps, pd, heads};
                if (!valid_tp(t) || std::find(seen.begin(), seen.end(), tp_label(t)) != seen.end()) continue;
                seen.push_back(tp_label(t));
                add(t, "edge", tp_label(t), plan_teaches(t));
            }
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 7);
    for (int i = 0; i < 12; ++i) {
        const TpConfig t = draw_tp(rng, false);
        add(t, "seeded", pa::strf("seed-%d-%s", i, tp_label(t).c_str()), "a TP pair drawn from the seed: " + plan_teaches(t));
    }
    return out;
}

// Exercise 1, TODO(2): scripted traces, traces drawn from the seed, and the grid.
inline std::vector<HostCase> ring_cases(uint64_t seed) {
    std::vector<HostCase> out;
    auto trace = [&](const std::string& name, const std::string& group, int64_t capacity, std::vector<int64_t> steps,
                     const std::string& teaches) {
        HostCase c;
        c.name = name;
        c.group = group;
        c.capacity = capacity;
        c.steps = std::move(steps);
        c.teaches = teaches;
        out.push_back(c);
    };
    trace("ring-wrap-over-live", "catalogue", 1024, {512, 512, 256, 0, 0},
          "a request wraps to offset 0 while the bytes there are still live: it must wait for their free");
    trace("ring-wrap-past-watermark", "catalogue", 1024, {512, 512, 0, 768, 0, 0},
          "a wrapped request ends past the oldest live allocation: its end, not its start, decides");
    trace("ring-wrap-before-watermark", "catalogue", 1024, {256, 256, 512, 0, 256, 0, 0, 0},
          "a wrapped request ends before the oldest live allocation: it may write at once");
    trace("ring-empty-restart", "edge", 1024, {512, 0, 256, 0, 768, 0},
          "the ring empties: the next request starts a new round at offset 0 and must not wait for anything");
    trace("ring-whole-ring", "edge", 1024, {1024, 1024, 0, 1024, 0, 0},
          "requests as large as the ring: each wraps and must wait for the one before it");
    trace("ring-many-laps", "edge", 768, {256, 256, 256, 256, 0, 256, 0, 256, 0, 256, 0, 0, 0, 0},
          "several laps with one allocation freed per request");
    std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + 11);
    for (int i = 0; i < 8; ++i) {
        HostCase c;
        c.name = pa::strf("ring-seed-%d", i);
        c.group = "seeded";
        c.alignment = 256;
        c.capacity = c.alignment * static_cast<int64_t>(2 + rng() % 15);
        c.random_steps = 60;
        c.seed = rng();
        c.teaches = "an allocate/free trace drawn from the seed (wraps, frees out of order, empty rings)";
        out.push_back(c);
    }
    HostCase g;
    g.name = "ring-grid";
    g.group = "edge";
    g.ring_grid = true;
    g.teaches = "every (round 0..3, bytes, watermark) combination of a small ring";
    out.push_back(g);
    return out;
}

// Exercise 2: decode TP above the heads; the lesson's 1 -> 4 with 2 heads, replicated prefill
// sides, MQA, one token, and chunks above 2^31 bytes.
inline std::vector<HostCase> replication_cases(uint64_t seed) {
    std::vector<HostCase> out;
    auto add = [&](const TpConfig& t, int layers, int tokens, const std::string& group, const std::string& teaches) {
        HostCase c;
        c.tp = t;
        c.layers = layers;
        c.tokens = tokens;
        c.group = group;
        c.name = pa::strf("T%d-L%d-%s", tokens, layers, tp_label(t).c_str());
        c.teaches = teaches;
        out.push_back(c);
    };
    add({1, 4, 2}, 32, 4096, "catalogue", "the lesson's TP1 -> TP4 with 2 heads: decode ranks 0,1 hold head 0, 2,3 head 1");
    add({2, 4, 2}, 32, 4096, "catalogue", "one head per prefill rank, two decode replicas of each");
    add({4, 8, 2}, 32, 256, "catalogue", "both sides replicated, fan-out");
    add({8, 4, 2}, 32, 256, "catalogue", "both sides replicated, fan-in: only one of a decode rank's writers may send");
    add({2, 8, 4}, 32, 32768, "catalogue", "two heads per prefill rank: the sender's local head index matters");
    for (int ps : {1, 2, 4, 8})
        for (int pd : {2, 4, 8, 16})
            if (valid_tp({ps, pd, 1})) add({ps, pd, 1}, 4, 100, "edge", "MQA: one head, on every rank of both sides");
    add({4, 4, 2}, 2, 17, "edge", "equal TP above the heads: rank r sends to rank r");
    add({16, 4, 2}, 2, 17, "edge", "four prefill replicas per decode rank: one sends, spread evenly");
    add({6, 12, 3}, 3, 33, "edge", "three heads: no power of two");
    add({12, 6, 3}, 3, 33, "edge", "three heads, fan-in");
    add({1, 8, 4}, 1, 1, "edge", "one token of one layer");
    add({2, 4, 2}, 64, 1 << 20, "edge", "a chunk above 2^31 bytes: bytes are 64-bit");
    std::mt19937_64 rng(seed * 0xBF58476D1CE4E5B9ull + 13);
    for (int i = 0; i < 10; ++i) {
        const TpConfig t = draw_tp(rng, true);
        const int layers = 1 + static_cast<int>(rng() % 80), tokens = 1 + static_cast<int>(rng() % 40000);
        add(t, layers, tokens, "seeded", "a TP pair and size drawn from the seed");
        out.back().name = pa::strf("seed-%d-", i) + out.back().name;
    }
    return out;
}

// ---- the checks: each returns "" or the first failure's line, and counts what it compared ----

inline std::string heads_text(int first, int count) { return pa::strf("[%d, %d)", first, first + count); }

inline std::string check_plan_case(const HostCase& c, const FillFunctions& f, int* checks) {
    const TpConfig& t = c.tp;
    try {
        for (int side = 0; side < 2; ++side) {
            const int tp = side == 0 ? t.prefill_tp : t.decode_tp;
            for (int r = 0; r < tp; ++r) {
                ++*checks;
                const lesson07::RankHeads want = lesson07::rank_heads(tp, r, t.kv_heads);
                const lesson07::RankHeads got = f.rank_heads(tp, r, t.kv_heads);
                if (got.first == want.first && got.count == want.count) continue;
                std::string m = pa::strf("rank_heads: %s rank %d of TP %d with %d heads holds %s, expected %s",
                                         side == 0 ? "prefill" : "decode", r, tp, t.kv_heads,
                                         heads_text(got.first, got.count).c_str(), heads_text(want.first, want.count).c_str());
                if (tp > t.kv_heads && got.first == (r % t.kv_heads) * want.count)
                    m += "; the rank is taken modulo the heads: with more ranks than heads, divide it by the replication";
                return m;
            }
        }
        const int src_hpr = lesson07::heads_per_rank(t.prefill_tp, t.kv_heads);
        const int dst_hpr = lesson07::heads_per_rank(t.decode_tp, t.kv_heads);
        for (int d = 0; d < t.decode_tp; ++d)
            for (int w = 0; w < lesson07::writers_per_reader(t); ++w) {
                ++*checks;
                const int p = lesson07::writer_rank(t, d, w);
                const lesson07::HeadSlice want = lesson07::head_slice(t, p, d);
                const lesson07::HeadSlice got = f.head_slice(t, p, d);
                if (got.src_head_start == want.src_head_start && got.num_heads == want.num_heads &&
                    got.dst_head_start == want.dst_head_start)
                    continue;
                std::string m = pa::strf("head_slice: prefill rank %d -> decode rank %d of %s: heads %s of the prefill pool land "
                                         "at %s, expected %s at %s",
                                         p, d, tp_label(t).c_str(), heads_text(got.src_head_start, got.num_heads).c_str(),
                                         heads_text(got.dst_head_start, got.num_heads).c_str(),
                                         heads_text(want.src_head_start, want.num_heads).c_str(),
                                         heads_text(want.dst_head_start, want.num_heads).c_str());
                if (got.dst_head_start < 0 || got.dst_head_start + got.num_heads > dst_hpr)
                    m += pa::strf("; that lands outside the decode rank's %d head(s)", dst_hpr);
                else if (got.src_head_start < 0 || got.src_head_start + got.num_heads > src_hpr)
                    m += pa::strf("; that reads outside the prefill rank's %d head(s)", src_hpr);
                else {
                    const int sent = lesson07::rank_heads(t.prefill_tp, p, t.kv_heads).first + got.src_head_start;
                    const int held = lesson07::rank_heads(t.decode_tp, d, t.kv_heads).first + got.dst_head_start;
                    if (sent != held)
                        m += pa::strf("; global head %d would land where the decode rank keeps head %d", sent, held);
                }
                return m;
            }
    } catch (const std::exception& e) {
        return std::string("threw: ") + e.what();
    }
    return "";
}

inline std::string alloc_text(const lesson07::RingAllocation& a) {
    return pa::strf("allocation #%lld (round %lld, bytes [%lld, %lld))", static_cast<long long>(a.id),
                    static_cast<long long>(a.round), static_cast<long long>(a.offset), static_cast<long long>(a.end()));
}
inline std::string wm_text(const lesson07::Watermark& w) {
    return pa::strf("watermark (%lld, %lld)", static_cast<long long>(w.round), static_cast<long long>(w.tail));
}

// One verdict of the student's check against the lesson's; `live` are the other allocations
// the decode side still holds (written or waiting to be), for naming what a wrong yes overwrites.
inline std::string judge_write(const lesson07::RingAllocation& a, const lesson07::Watermark& wm,
                               const std::vector<lesson07::RingAllocation>& live, const FillFunctions& f) {
    const bool want = lesson07::prefill_may_write(a, wm), got = f.may_write(a, wm);
    if (got == want) return "";
    if (got) {
        for (const auto& o : live)
            if (o.id != a.id && o.round < a.round && o.offset < a.end() && a.offset < o.end())
                return "prefill_may_write lets " + alloc_text(a) + " be written over " + alloc_text(o) +
                       ", which is still live (" + wm_text(wm) + ")";
        return "prefill_may_write lets " + alloc_text(a) + " be written, which the " + wm_text(wm) + " forbids";
    }
    bool alone = true;
    for (const auto& o : live) alone = alone && o.id == a.id;
    if (alone)
        return "prefill_may_write refuses " + alloc_text(a) + " with " + wm_text(wm) +
               " although nothing else is live: the writer waits forever (the empty-ring case)";
    return "prefill_may_write refuses " + alloc_text(a) + " with " + wm_text(wm) +
           " although every byte it overwrites is free: the writer waits for nothing";
}

inline std::string check_ring_case(const HostCase& c, const FillFunctions& f, int* checks) {
    using lesson07::RingAllocation;
    try {
        if (c.ring_grid) {
            for (int64_t round = 0; round < 4; ++round)
                for (int64_t offset : {0, 256, 512})
                    for (int64_t bytes : {256, 512})
                        for (int64_t wr = 0; wr < 4; ++wr)
                            for (int64_t tail : {0, 256, 512, 768}) {
                                ++*checks;
                                RingAllocation a;
                                a.id = 0;
                                a.round = round;
                                a.offset = offset;
                                a.bytes = bytes;
                                const lesson07::Watermark wm{wr, tail};
                                const bool want = lesson07::prefill_may_write(a, wm);
                                if (f.may_write(a, wm) != want)
                                    return "prefill_may_write(" + alloc_text(a) + ", " + wm_text(wm) + ") says " +
                                           (want ? "no" : "yes") + ", expected " + (want ? "yes" : "no");
                            }
            return "";
        }
        lesson07::StagingRing ring(c.capacity, c.alignment);
        std::vector<RingAllocation> pending, written;  // allocated and not yet written; written and not yet freed
        std::mt19937_64 rng(c.seed);
        auto evaluate = [&]() -> std::string {
            const lesson07::Watermark wm = ring.watermark();
            std::vector<RingAllocation> live = written;
            live.insert(live.end(), pending.begin(), pending.end());
            std::vector<RingAllocation> still;
            for (const auto& a : pending) {
                ++*checks;
                const std::string m = judge_write(a, wm, live, f);
                if (!m.empty()) return m;
                (lesson07::prefill_may_write(a, wm) ? written : still).push_back(a);
            }
            pending = still;
            std::sort(written.begin(), written.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
            return "";
        };
        auto step = [&](int64_t s) -> std::string {
            if (s > 0) {
                if (auto a = ring.allocate(s)) pending.push_back(*a);
            } else if (!written.empty()) {
                const size_t i = s == 0 ? 0 : written.size() - 1;
                ring.free(written[i].id);
                written.erase(written.begin() + static_cast<long>(i));
            }
            return evaluate();
        };
        for (int64_t s : c.steps) {
            const std::string m = step(s);
            if (!m.empty()) return m;
        }
        for (int i = 0; i < c.random_steps; ++i) {  // allocate (up to the whole ring) or free the oldest or newest
            const bool alloc = written.empty() || rng() % 2;
            const int64_t s = alloc ? 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(c.capacity))
                                    : -static_cast<int64_t>(rng() % 2);
            const std::string m = step(s);
            if (!m.empty()) return m;
        }
        // Drain: free what was written until every allocation has been written.
        for (int guard = 0; !(pending.empty() && written.empty()) && guard < 10000; ++guard) {
            const std::string m = step(0);
            if (!m.empty()) return m;
        }
    } catch (const std::exception& e) {
        return std::string("threw: ") + e.what();
    }
    return "";
}

inline int64_t head_bytes(int layers, int tokens) {
    return 2 * int64_t{layers} * tokens * lesson07::kHeadDim * lesson07::kElemBytes;  // K and V
}

inline std::string check_replication_case(const HostCase& c, const TpFunction& f, int* checks) {
    const TpConfig& t = c.tp;
    const int64_t hb = head_bytes(c.layers, c.tokens);
    const std::vector<pa::reference::ReplicaSendRef> ref =
        pa::reference::replicated_handoff(t.prefill_tp, t.decode_tp, t.kv_heads, hb);
    ReplicatedPlan plan;
    try {
        plan = f(t, c.layers, c.tokens);
    } catch (const std::exception& e) {
        ++*checks;
        return std::string("threw: ") + e.what();
    }
    // Each decode rank receives its own head exactly once.
    ++*checks;
    std::vector<int> received(t.decode_tp, 0);
    for (const ReplicaSend& s : plan.sends) {
        if (s.dst_rank < 0 || s.dst_rank >= t.decode_tp)
            return pa::strf("a send goes to decode rank %d, outside TP %d", s.dst_rank, t.decode_tp);
        ++received[s.dst_rank];
    }
    for (int d = 0; d < t.decode_tp; ++d)
        if (received[d] != 1)
            return pa::strf("decode rank %d receives its head %d times, expected exactly once (%zu sends for %d decode ranks)",
                            d, received[d], plan.sends.size(), t.decode_tp);
    for (size_t i = 0; i < plan.sends.size(); ++i) {
        ++*checks;
        const ReplicaSend& s = plan.sends[i];
        const pa::reference::ReplicaSendRef& r = ref[s.dst_rank];
        if (s.dst_rank != static_cast<int>(i))
            return pa::strf("send %zu goes to decode rank %d: the sends must be in decode-rank order", i, s.dst_rank);
        if (s.head != r.head) {
            std::string m = pa::strf("decode rank %d holds head %d but is sent head %d", s.dst_rank, r.head, s.head);
            if (s.head == s.dst_rank % t.kv_heads) m += "; the rank is taken modulo the heads: divide it by the replication";
            return m;
        }
        if (s.src_rank < 0 || s.src_rank >= t.prefill_tp)
            return pa::strf("decode rank %d's head is sent by prefill rank %d, outside TP %d", s.dst_rank, s.src_rank, t.prefill_tp);
        const lesson07::RankHeads held = lesson07::rank_heads(t.prefill_tp, s.src_rank, t.kv_heads);
        if (s.head < held.first || s.head >= held.first + held.count)
            return pa::strf("prefill rank %d sends head %d to decode rank %d, but it holds heads %s", s.src_rank, s.head,
                            s.dst_rank, heads_text(held.first, held.count).c_str());
        if (s.src_head != s.head - held.first)
            return pa::strf("head %d sits at local index %d of prefill rank %d, not %d", s.head, s.head - held.first, s.src_rank,
                            s.src_head);
        if (s.src_rank != r.src_rank) {
            std::vector<int> load(t.prefill_tp, 0);
            for (const ReplicaSend& o : plan.sends) ++load[o.src_rank];
            const int rep_p = lesson07::replication(t.prefill_tp, t.kv_heads);
            int lo = 1 << 30, hi = 0;
            for (int p = 0; p < t.prefill_tp; ++p)
                if (p / rep_p == s.src_rank / rep_p) lo = std::min(lo, load[p]), hi = std::max(hi, load[p]);
            std::string m = pa::strf("decode rank %d's head %d comes from prefill rank %d, expected %d", s.dst_rank, s.head,
                                     s.src_rank, r.src_rank);
            if (hi - lo > 1)
                m += pa::strf("; the sends are not spread over the prefill ranks holding the head (%d to %d sends each)", lo, hi);
            else
                m += " (decode replica j is sent by prefill replica j * rep_p / rep_d)";
            return m;
        }
        if (s.bytes != r.bytes)
            return pa::strf("decode rank %d is sent %lld bytes, expected %lld (K and V of %d layers x %d tokens x %d x %d bytes)",
                            s.dst_rank, static_cast<long long>(s.bytes), static_cast<long long>(r.bytes), c.layers, c.tokens,
                            lesson07::kHeadDim, lesson07::kElemBytes);
    }
    ++*checks;
    if (static_cast<int>(plan.bytes_sent.size()) != t.prefill_tp)
        return pa::strf("bytes_sent has %zu entries, expected one per prefill rank (%d)", plan.bytes_sent.size(), t.prefill_tp);
    std::vector<int64_t> sent(t.prefill_tp, 0);
    for (const auto& r : ref) sent[r.src_rank] += r.bytes;
    for (int p = 0; p < t.prefill_tp; ++p)
        if (plan.bytes_sent[p] != sent[p])
            return pa::strf("prefill rank %d sends %lld bytes in all, expected %lld", p, static_cast<long long>(plan.bytes_sent[p]),
                            static_cast<long long>(sent[p]));
    const int rep_d = t.decode_tp / t.kv_heads;
    if (plan.total_bytes != int64_t{rep_d} * t.kv_heads * hb)
        return pa::strf("total bytes %lld, expected replication %d x %d heads x %lld bytes = %lld",
                        static_cast<long long>(plan.total_bytes), rep_d, t.kv_heads, static_cast<long long>(hb),
                        static_cast<long long>(int64_t{rep_d} * t.kv_heads * hb));
    return "";
}

}  // namespace lesson07_exercise
