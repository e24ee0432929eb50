// Lesson 07's exercise graders without a GPU (both exercises are host code): the replicated
// hand-off reference (reference/tp_replication_reference.h) against the lesson's own plan and
// the invariants; the checks of exercise/harness/grading.h pass the lesson's functions and a
// plan built from the reference, and fail known-wrong answers with the line that names them.
// The executables' honesty tests (exercise.lesson07.*) prove the same of the built graders.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "exercise/harness/grading.h"
#include "staging_plan.h"
#include "staging_ring.h"
#include "tp_replication_reference.h"

namespace {

using namespace lesson07_exercise;
using lesson07::TpConfig;

std::vector<TpConfig> replicated_configs() {
    std::vector<TpConfig> out;
    for (int heads : {1, 2, 3, 4, 6, 8, 16})
        for (int ps = 1; ps <= 32; ++ps)
            for (int pd = heads + 1; pd <= 32; ++pd)
                if (valid_tp({ps, pd, heads})) out.push_back({ps, pd, heads});
    return out;
}

FillFunctions lesson_fill() {
    FillFunctions f;
    f.rank_heads = [](int tp, int r, int h) { return lesson07::rank_heads(tp, r, h); };
    f.head_slice = [](const TpConfig& t, int s, int d) { return lesson07::head_slice(t, s, d); };
    f.may_write = [](const lesson07::RingAllocation& a, const lesson07::Watermark& w) { return lesson07::prefill_may_write(a, w); };
    return f;
}

// A plan from the reference: what a correct answer returns.
ReplicatedPlan plan_from_reference(const TpConfig& t, int layers, int tokens) {
    ReplicatedPlan p;
    p.bytes_sent.assign(t.prefill_tp, 0);
    for (const auto& r : pa::reference::replicated_handoff(t.prefill_tp, t.decode_tp, t.kv_heads, head_bytes(layers, tokens))) {
        p.sends.push_back({r.dst_rank, r.head, r.src_rank, r.src_head, r.bytes});
        p.bytes_sent[r.src_rank] += r.bytes;
        p.total_bytes += r.bytes;
    }
    return p;
}

// The first failure line over all cases ("" when every case passes).
template <class Check>
std::string first_failure(const std::vector<HostCase>& cases, Check check) {
    for (const HostCase& c : cases) {
        int n = 0;
        const std::string m = check(c, &n);
        if (!m.empty()) return c.name + ": " + m;
    }
    return "";
}

// Every failure line over all cases, joined.
template <class Check>
std::string all_failures(const std::vector<HostCase>& cases, Check check) {
    std::string s;
    for (const HostCase& c : cases) {
        int n = 0;
        const std::string m = check(c, &n);
        if (!m.empty()) s += c.name + ": " + m + "\n";
    }
    return s;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("replicated hand-off reference: the lesson's first writer, each decode rank once, balanced", "[exercise][lesson07]") {
    const std::vector<TpConfig> configs = replicated_configs();
    REQUIRE(configs.size() > 40);
    for (const TpConfig& t : configs) {
        INFO(tp_label(t));
        const int64_t hb = 1000;
        const auto ref = pa::reference::replicated_handoff(t.prefill_tp, t.decode_tp, t.kv_heads, hb);
        REQUIRE(static_cast<int>(ref.size()) == t.decode_tp);
        std::vector<int> receivers(t.kv_heads, 0), load(t.prefill_tp, 0);
        int64_t total = 0;
        for (int d = 0; d < t.decode_tp; ++d) {
            const auto& r = ref[d];
            REQUIRE(r.dst_rank == d);
            // The decode rank's own head, from a prefill rank that holds it, at its local index there.
            REQUIRE(r.head == lesson07::rank_heads(t.decode_tp, d, t.kv_heads).first);
            const lesson07::RankHeads held = lesson07::rank_heads(t.prefill_tp, r.src_rank, t.kv_heads);
            REQUIRE(r.head >= held.first);
            REQUIRE(r.head < held.first + held.count);
            REQUIRE(r.src_head == r.head - held.first);
            // The sender is the first of the decode rank's writers in the lesson's plan, and the
            // slice the lesson plans for that pair starts at the same local head.
            REQUIRE(r.src_rank == lesson07::writer_rank(t, d, 0));
            REQUIRE(r.src_head == lesson07::head_slice(t, r.src_rank, d).src_head_start);
            ++receivers[r.head];
            ++load[r.src_rank];
            total += r.bytes;
        }
        for (int h = 0; h < t.kv_heads; ++h) REQUIRE(receivers[h] == t.decode_tp / t.kv_heads);
        REQUIRE(total == int64_t{t.decode_tp / t.kv_heads} * t.kv_heads * hb);
        // Balanced: the prefill ranks holding one head send within one of each other.
        const int rep_p = lesson07::replication(t.prefill_tp, t.kv_heads);
        for (int p0 = 0; p0 < t.prefill_tp; p0 += rep_p) {
            const auto lo = std::min_element(load.begin() + p0, load.begin() + p0 + rep_p);
            const auto hi = std::max_element(load.begin() + p0, load.begin() + p0 + rep_p);
            REQUIRE(*hi - *lo <= 1);
        }
    }
}

TEST_CASE("replicated hand-off reference: the lesson's plan sends a head several times where Ps > Pd > heads",
          "[exercise][lesson07]") {
    // The reason the exercise exists: 8 -> 4 with 2 heads, the lesson's plan has two writers per
    // decode rank, both holding its one head.
    const TpConfig t{8, 4, 2};
    const lesson07::TransferPlan lp = lesson07::make_transfer_plan(t, 2, 16);
    REQUIRE(lp.pairs.size() == 8);
    REQUIRE(pa::reference::replicated_handoff(8, 4, 2, 1).size() == 4);
    REQUIRE_THROWS(pa::reference::replicated_handoff(2, 2, 2, 1));  // Pd must exceed the heads
    REQUIRE_THROWS(pa::reference::replicated_handoff(3, 4, 2, 1));  // Ps does not split the heads
}

TEST_CASE("lesson 07 exercise cases: seeded pairs are valid, deterministic and differ between seeds", "[exercise][lesson07]") {
    auto names = [](const std::vector<HostCase>& cs) {
        std::vector<std::string> n;
        for (const auto& c : cs) n.push_back(c.name);
        return n;
    };
    REQUIRE(names(plan_cases(1)) == names(plan_cases(1)));
    REQUIRE(names(plan_cases(1)) != names(plan_cases(2)));
    REQUIRE(names(replication_cases(1)) != names(replication_cases(2)));
    for (const auto& c : replication_cases(5)) {
        INFO(c.name);
        REQUIRE(valid_tp(c.tp));
        REQUIRE(c.tp.decode_tp > c.tp.kv_heads);
    }
    std::set<std::string> groups;
    for (const auto& c : plan_cases(3)) groups.insert(c.group);
    REQUIRE(groups == std::set<std::string>{"catalogue", "edge", "seeded"});
    // The ring traces include the empty-ring restart and a wrap over live bytes.
    const auto ring = ring_cases(3);
    REQUIRE(std::any_of(ring.begin(), ring.end(), [](const HostCase& c) { return c.name == "ring-empty-restart"; }));
    REQUIRE(std::any_of(ring.begin(), ring.end(), [](const HostCase& c) { return c.name == "ring-wrap-over-live"; }));
}

TEST_CASE("lesson 07 fill grader: the lesson's functions pass, known-wrong ones fail by name", "[exercise][lesson07]") {
    for (uint64_t seed : {0ull, 1ull, 918273ull}) {
        INFO("seed " << seed);
        const FillFunctions f = lesson_fill();
        REQUIRE(first_failure(plan_cases(seed), [&](const HostCase& c, int* n) { return check_plan_case(c, f, n); }) == "");
        REQUIRE(first_failure(ring_cases(seed), [&](const HostCase& c, int* n) { return check_ring_case(c, f, n); }) == "");
    }
    const std::vector<HostCase> plan = plan_cases(0), ring = ring_cases(0);
    auto plan_fails = [&](const FillFunctions& f) {
        return all_failures(plan, [&](const HostCase& c, int* n) { return check_plan_case(c, f, n); });
    };
    auto ring_fails = [&](const FillFunctions& f) {
        return all_failures(ring, [&](const HostCase& c, int* n) { return check_ring_case(c, f, n); });
    };
    FillFunctions m = lesson_fill();
    m.rank_heads = [](int tp, int r, int h) {
        const int hpr = lesson07::heads_per_rank(tp, h);
        return lesson07::RankHeads{(r % h) * hpr, hpr};
    };
    CHECK(has(plan_fails(m), "taken modulo the heads"));
    m = lesson_fill();
    m.head_slice = [](const TpConfig& t, int s, int d) {
        lesson07::HeadSlice x = lesson07::head_slice(t, s, d);
        if (t.prefill_tp > t.decode_tp)
            x.dst_head_start = (s / lesson07::replication(t.prefill_tp, t.kv_heads)) * lesson07::heads_per_rank(t.prefill_tp, t.kv_heads);
        return x;
    };
    CHECK(has(plan_fails(m), "lands outside the decode rank"));
    m = lesson_fill();
    m.may_write = [](const lesson07::RingAllocation& a, const lesson07::Watermark& w) { return a.round == 0 || a.round - 1 <= w.round; };
    CHECK(has(ring_fails(m), "which is still live"));
    m.may_write = [](const lesson07::RingAllocation& a, const lesson07::Watermark& w) {
        return a.round == 0 || (a.round - 1 == w.round && a.end() <= w.tail);
    };
    CHECK(has(ring_fails(m), "waits forever"));
    m.may_write = [](const lesson07::RingAllocation&, const lesson07::Watermark&) { return true; };
    CHECK(has(ring_fails(m), "which is still live"));
    // A check that is one step too careful (waits for the end of the oldest live allocation).
    m.may_write = [](const lesson07::RingAllocation& a, const lesson07::Watermark& w) {
        return a.round == 0 || a.round - 1 < w.round || (a.round - 1 == w.round && a.end() < w.tail);
    };
    CHECK(has(ring_fails(m), "waits for nothing"));
}

TEST_CASE("lesson 07 tp grader: a correct plan passes, known-wrong plans fail by name", "[exercise][lesson07]") {
    for (uint64_t seed : {0ull, 1ull, 918273ull}) {
        INFO("seed " << seed);
        REQUIRE(first_failure(replication_cases(seed), [&](const HostCase& c, int* n) {
                    return check_replication_case(c, plan_from_reference, n);
                }) == "");
    }
    const std::vector<HostCase> cases = replication_cases(0);
    auto fails = [&](const TpFunction& f) {
        return all_failures(cases, [&](const HostCase& c, int* n) { return check_replication_case(c, f, n); });
    };
    // The lesson's own plan: every writer of a decode rank sends its head.
    CHECK(has(fails([](const TpConfig& t, int layers, int tokens) {
              const lesson07::TransferPlan lp = lesson07::make_transfer_plan(t, layers, tokens);
              ReplicatedPlan p;
              p.bytes_sent.assign(t.prefill_tp, 0);
              for (const auto& x : lp.pairs) {
                  p.sends.push_back({x.dst_rank, lesson07::rank_heads(t.decode_tp, x.dst_rank, t.kv_heads).first, x.src_rank,
                                     x.slice.src_head_start, x.bytes});
                  p.bytes_sent[x.src_rank] += x.bytes;
                  p.total_bytes += x.bytes;
              }
              return p;
          }),
              "receives its head 2 times"));
    CHECK(has(fails([](const TpConfig& t, int layers, int tokens) {
              ReplicatedPlan p = plan_from_reference(t, layers, tokens);
              for (auto& s : p.sends) s.head = s.dst_rank % t.kv_heads;
              return p;
          }),
              "taken modulo the heads"));
    CHECK(has(fails([](const TpConfig& t, int layers, int tokens) {
              ReplicatedPlan p = plan_from_reference(t, layers, tokens);
              p.total_bytes /= t.decode_tp / t.kv_heads;  // counts each head once
              return p;
          }),
              "total bytes"));
    CHECK(has(fails([](const TpConfig& t, int layers, int tokens) {
              ReplicatedPlan p = plan_from_reference(t, layers, tokens);
              p.sends.pop_back();
              return p;
          }),
              "receives its head 0 times"));
    CHECK(has(fails([](const TpConfig& t, int layers, int tokens) {
              ReplicatedPlan p = plan_from_reference(t, layers, tokens);
              for (auto& s : p.sends) s.src_head = 0;
              return p;
          }),
              "sits at local index"));
}
