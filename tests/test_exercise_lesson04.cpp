// Lesson 04's exercise on the CPU: the ragged scratch's reference (reference/
// ragged_scratch_reference.h) against a count of every entry and against the lesson's own
// arithmetic, the plan grader's cases and diagnoses, and the solution against every case.
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <set>
#include <tuple>

#include "exercise/harness/plan_grader.h"
#include "exercise/solution/plan.cuh"
#include "pow2_plan.h"
#include "ragged_scratch_reference.h"

namespace {

using lesson04_exercise::RaggedScratch;

RaggedScratch from_reference(const lesson04_exercise::PlanCase& c) {
    const pa::reference::RaggedScratchRef r = pa::reference::ragged_scratch(c.ctx, c.H, c.D, c.partition_size);
    return {r.segments, r.first, r.segments_p2, r.bytes, r.padded_bytes};
}

}  // namespace

TEST_CASE("ragged scratch reference: every (sequence, head, segment) has one entry of its own", "[exercise]") {
    pa::Rng rng(7, 1);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<int> ctx(1 + rng.below(9));
        for (int& x : ctx) x = static_cast<int>(rng.below(3000));
        const int H = 1 + static_cast<int>(rng.below(5)), D = 64 << rng.below(3);
        const int ps = lesson04::kPartitionSizes[rng.below(5)];
        const pa::reference::RaggedScratchRef r = pa::reference::ragged_scratch(ctx, H, D, ps);
        // the segments a context has: the distinct partitions its tokens fall in
        std::set<long long> seen;
        for (size_t b = 0; b < ctx.size(); ++b) {
            std::set<int> parts;
            for (int t = 0; t < ctx[b]; ++t) parts.insert(t / ps);
            REQUIRE(r.segments[b] == static_cast<int>(parts.size()));
            for (int h = 0; h < H; ++h)
                for (int s : parts) {
                    const long long e = r.first[b] + static_cast<long long>(h) * r.segments[b] + s;
                    REQUIRE(e >= r.first[b]);
                    REQUIRE(e < r.first[b + 1]);
                    REQUIRE(seen.insert(e).second);  // no two share an entry
                }
        }
        // ... and no entry is left over: the entries are exactly 0 .. first[B] - 1
        REQUIRE(r.first.front() == 0);
        REQUIRE(static_cast<long long>(seen.size()) == r.first.back());
        REQUIRE(r.bytes == r.first.back() * 4LL * (2 + D));
    }
}

TEST_CASE("ragged scratch reference agrees with the lesson's segment count, width and scratch bytes", "[exercise]") {
    for (int ps : lesson04::kPartitionSizes)
        for (int ctx : {1, ps - 1, ps, ps + 1, 17 * ps + 3, lesson04::kMaxSegments * ps}) {
            if (ctx < 1) continue;
            const std::vector<int> batch(5, ctx);
            const pa::reference::RaggedScratchRef r = pa::reference::ragged_scratch(batch, 3, 128, ps);
            const int n = lesson04::segments_for(ctx, ps);
            REQUIRE(r.segments.front() == n);
            REQUIRE(r.segments_p2 == lesson04::next_pow2(n));
            // a batch of equal lengths is the lesson's pow2_lanes scratch, and pad_scratch's
            REQUIRE(r.bytes == lesson04::scratch_bytes(5, 3, 128, lesson04::scratch_partitions(lesson04::Fix::pow2_lanes, n)));
            REQUIRE(r.padded_bytes ==
                    lesson04::scratch_bytes(5, 3, 128, lesson04::scratch_partitions(lesson04::Fix::pad_scratch, n)));
        }
    // no segment at all: width 1, as lesson04::next_pow2(0), and an empty scratch
    const pa::reference::RaggedScratchRef z = pa::reference::ragged_scratch({0, 0}, 4, 64, 32);
    REQUIRE(z.segments_p2 == 1);
    REQUIRE(z.bytes == 0);
    REQUIRE(z.first == std::vector<long long>{0, 0, 0});
}

TEST_CASE("plan grader: the cases cover the edges, and the seed chooses the drawn batches", "[exercise]") {
    const auto a = lesson04_exercise::plan_cases(1), b = lesson04_exercise::plan_cases(1), c = lesson04_exercise::plan_cases(2);
    REQUIRE(a.size() == c.size());
    bool differ = false, zero = false, maximum = false;
    for (size_t i = 0; i < a.size(); ++i) {
        REQUIRE(a[i].ctx == b[i].ctx);
        if (a[i].group == "seeded" && a[i].ctx != c[i].ctx) differ = true;
        for (int x : a[i].ctx) zero |= x == 0;
        if (a[i].name == "the-maximum") {
            maximum = true;
            REQUIRE(from_reference(a[i]).bytes > (1LL << 32));  // past 32 bits, signed or not
        }
        // every case is a batch the lesson can run: at most kMaxSegments segments
        for (int x : a[i].ctx) REQUIRE(lesson04::segments_for(x, a[i].partition_size) <= lesson04::kMaxSegments);
    }
    REQUIRE(differ);
    REQUIRE(zero);
    REQUIRE(maximum);
}

TEST_CASE("plan grader: the solution passes every case of several seeds", "[exercise]") {
    for (uint64_t seed : {0ULL, 1ULL, 918273ULL})
        for (const auto& c : lesson04_exercise::plan_cases(seed)) {
            INFO(c.name);
            REQUIRE(lesson04_exercise::check_plan(c, ex_plan::plan_ragged(c.ctx, c.H, c.D, c.partition_size)) == "");
        }
}

TEST_CASE("plan grader: known mistakes are named", "[exercise]") {
    lesson04_exercise::PlanCase c{"t", "edge", "", {31, 64, 65, 0}, 4, 128, 32};
    const RaggedScratch right = from_reference(c);
    REQUIRE(lesson04_exercise::check_plan(c, right).empty());

    REQUIRE(lesson04_exercise::check_plan(c, RaggedScratch{}).find("segments has 0 entries") != std::string::npos);

    RaggedScratch floor = right;
    for (size_t b = 0; b < c.ctx.size(); ++b) floor.segments[b] = c.ctx[b] / c.partition_size;
    REQUIRE(lesson04_exercise::check_plan(c, floor).find("rounds down") != std::string::npos);

    RaggedScratch no_heads = right;
    for (size_t b = 0; b < c.ctx.size(); ++b) no_heads.first[b + 1] = no_heads.first[b] + right.segments[b];
    REQUIRE(lesson04_exercise::check_plan(c, no_heads).find("heads' segments") != std::string::npos);

    RaggedScratch inclusive = right;
    for (size_t b = 0; b < c.ctx.size(); ++b) inclusive.first[b] = right.first[b + 1];
    REQUIRE(lesson04_exercise::check_plan(c, inclusive).find("where sequence 0 starts") != std::string::npos);

    RaggedScratch not_pow2 = right;
    not_pow2.segments_p2 = 3;
    REQUIRE(lesson04_exercise::check_plan(c, not_pow2).find("not a power of two") != std::string::npos);

    RaggedScratch no_ml = right;
    no_ml.bytes = right.first.back() * 4LL * c.D;
    REQUIRE(lesson04_exercise::check_plan(c, no_ml).find("leaves out m and l") != std::string::npos);

    lesson04_exercise::PlanCase big{"big", "edge", "", std::vector<int>(1024, 1024 * 512), 128, 256, 512};
    RaggedScratch wrapped = from_reference(big);
    wrapped.bytes = static_cast<long long>(static_cast<int32_t>(wrapped.bytes));
    REQUIRE(lesson04_exercise::check_plan(big, wrapped).find("overflowed a 32-bit int") != std::string::npos);
}
