// Lesson 04's plan exercise, graded on the CPU: the student's plan_ragged (plan.cuh) against
// the reference (reference/ragged_scratch_reference.h) on the lesson's catalogue batches, on
// batches drawn from a seed and on named edge cases. Plain C++, header only, so that the CPU
// tests use the same cases and the same diagnosis as the grader executable.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "exercise_grader.h"
#include "pow2_plan.h"
#include "random.h"
#include "table.h"
#include "ragged_scratch_reference.h"

namespace lesson04_exercise {

// What plan.cuh returns: the scratch of a batch laid out ragged (the layout is in
// ragged_scratch_reference.h), the reduce's width over it, and what it and pad_scratch cost.
struct RaggedScratch {
    std::vector<int> segments;     // [B]: segments (partitions) of sequence b's context
    std::vector<long long> first;  // [B + 1]: sequence b's first entry; first[B]: every entry
    int segments_p2 = 0;           // the reduce's lane width
    long long bytes = 0;           // the ragged scratch: m, l and D floats of acc per entry
    long long padded_bytes = 0;    // lesson 04's pad_scratch for the same batch
};
using PlanFn = std::function<RaggedScratch(const std::vector<int>& context_lens, int H, int D, int partition_size)>;

struct PlanCase {
    std::string name, group, teaches;
    std::vector<int> ctx;
    int H = 1, D = 128, partition_size = 32;
};

// The largest batch a case draws: every sequence at kMaxSegments partitions of 512 tokens.
constexpr int kPlanMaxB = 1024, kPlanMaxH = 128, kPlanMaxCtx = lesson04::kMaxSegments * 512;

inline std::vector<PlanCase> plan_cases(uint64_t seed) {
    std::vector<PlanCase> cases;
    // the lesson's check shapes, at the partition size its pipelines pick
    for (const pa::DecodeShape& s : pa::decode_check_shapes()) {
        const int ps = lesson04::pick_partition_size(s.max_ctx());
        if (ps == 0) continue;
        cases.push_back({s.name, "catalogue", "a batch of the lesson's --check shapes", s.ctx, s.H, s.D, ps});
    }
    // seeded: B 1..64, lengths log-uniform up to 128k with some finished (0), any partition
    // size that keeps the longest at most kMaxSegments segments
    pa::Rng rng(seed, 0x9a11);
    for (int i = 0; i < 12; ++i) {
        PlanCase c;
        c.name = "seed-" + std::to_string(i);
        c.group = "seeded";
        c.teaches = "a batch drawn from the seed";
        const int B = 1 + static_cast<int>(rng.below(64));
        for (int b = 0; b < B; ++b) {
            const double u = rng.uniform();
            c.ctx.push_back(rng.below(8) == 0 ? 0 : static_cast<int>(std::exp(u * std::log(131072.0))));
        }
        c.H = 1 + static_cast<int>(rng.below(64));
        c.D = 64 << rng.below(3);
        const int smallest = std::max(1, lesson04::pick_partition_size(*std::max_element(c.ctx.begin(), c.ctx.end())));
        std::vector<int> sizes;
        for (int ps : lesson04::kPartitionSizes)
            if (ps >= smallest) sizes.push_back(ps);
        c.partition_size = sizes[rng.below(sizes.size())];
        cases.push_back(c);
    }
    auto edge = [&](const std::string& name, std::vector<int> ctx, int H, int D, int ps, const std::string& teaches) {
        cases.push_back({name, "edge", teaches, std::move(ctx), H, D, ps});
    };
    edge("ctx-1", {1}, 1, 128, 32, "one token is one segment");
    edge("ctx-0", {0, 40, 0, 7}, 4, 128, 32, "a finished sequence (ctx 0) holds no segment and takes no entries");
    edge("all-ctx-0", {0, 0, 0}, 8, 64, 64, "no segment at all: the width is still a power of two (1), the scratch 0 bytes");
    for (int ps : lesson04::kPartitionSizes)
        edge("partition-pm1-" + std::to_string(ps), {ps - 1, ps, ps + 1, 2 * ps + 1}, 2, 128, ps,
             "lengths around the partition size: a partly filled partition is a segment too");
    edge("segments-pow2-pm1-32", {31 * 32, 32 * 32, 33 * 32 - 5}, 4, 128, 32,
         "31, 32 and 33 segments: the width of 33 is 64, of 32 is 32");
    edge("segments-pow2-pm1-1024", {1023 * 32, 1024 * 32, 5}, 2, 256, 32, "1023 and 1024 segments: the widest reduce");
    edge("mixed-lengths", {1, 2000, 17, 640, 129, 3}, 8, 128, 32, "each sequence takes its own length's segments");
    edge("the-maximum", std::vector<int>(kPlanMaxB, kPlanMaxCtx), kPlanMaxH, 256, 512,
         "the largest batch: over 10^11 bytes, past what a 32-bit int holds");
    return cases;
}

// "" when `got` is the plan of case c, else one line naming the first wrong field and, where a
// known mistake explains it, the mistake.
inline std::string check_plan(const PlanCase& c, const RaggedScratch& got) {
    const pa::reference::RaggedScratchRef want = pa::reference::ragged_scratch(c.ctx, c.H, c.D, c.partition_size);
    const size_t B = c.ctx.size();
    const long long entry_bytes = 4LL * (2 + c.D);
    if (got.segments.size() != B)
        return pa::strf("segments has %zu entries; a batch of %zu sequences needs one per sequence", got.segments.size(), B);
    for (size_t b = 0; b < B; ++b)
        if (got.segments[b] != want.segments[b]) {
            if (got.segments[b] == c.ctx[b] / c.partition_size)
                return pa::strf("segments[%zu] is %d for ctx %d at partition %d: ctx / partition_size rounds down, but a "
                                "partly filled partition is a segment too (%d)",
                                b, got.segments[b], c.ctx[b], c.partition_size, want.segments[b]);
            return pa::strf("segments[%zu] is %d for ctx %d at partition %d, expected %d", b, got.segments[b], c.ctx[b],
                            c.partition_size, want.segments[b]);
        }
    if (got.first.size() != B + 1)
        return pa::strf("first has %zu entries; it needs B + 1 = %zu (first[B] counts every entry)", got.first.size(), B + 1);
    long long no_heads = 0, inclusive = 0;
    for (size_t b = 0; b <= B; ++b) {
        inclusive += b < B ? static_cast<long long>(c.H) * want.segments[b] : 0;
        if (got.first[b] != want.first[b]) {
            if (got.first[b] == no_heads)
                return pa::strf("first[%zu] is %lld, expected %lld: each sequence holds its %d heads' segments "
                                "(H * segments[b] entries), not its segments once",
                                b, got.first[b], want.first[b], c.H);
            if (b < B && got.first[b] == inclusive)
                return pa::strf("first[%zu] is %lld, expected %lld: it counts sequence %zu's own entries; it is where "
                                "sequence %zu starts",
                                b, got.first[b], want.first[b], b, b);
            return pa::strf("first[%zu] is %lld, expected %lld", b, got.first[b], want.first[b]);
        }
        if (b < B) no_heads += want.segments[b];
    }
    if (got.segments_p2 != want.segments_p2) {
        if (got.segments_p2 < 1 || (got.segments_p2 & (got.segments_p2 - 1)) != 0)
            return pa::strf("segments_p2 is %d, not a power of two: the reduce's shuffles need one (expected %d)",
                            got.segments_p2, want.segments_p2);
        return pa::strf("segments_p2 is %d, expected %d: the smallest power of two holding the longest sequence's "
                        "segments",
                        got.segments_p2, want.segments_p2);
    }
    auto wrapped = [](long long x, long long w) {
        return x != w && (x == static_cast<long long>(static_cast<int32_t>(w)) ||
                          x == static_cast<long long>(static_cast<uint32_t>(w)));
    };
    const struct {
        const char* name;
        long long got, want, entries;
    } sizes[] = {{"bytes", got.bytes, want.bytes, want.first[B]},
                 {"padded_bytes", got.padded_bytes, want.padded_bytes, static_cast<long long>(B) * c.H * want.segments_p2}};
    for (const auto& f : sizes) {
        if (f.got == f.want) continue;
        if (wrapped(f.got, f.want))
            return pa::strf("%s is %lld, expected %lld: it overflowed a 32-bit int (compute sizes in 64 bits)", f.name,
                            f.got, f.want);
        if (f.got == f.entries * 4LL * c.D)
            return pa::strf("%s is %lld, expected %lld: it leaves out m and l (an entry is 2 + D floats)", f.name, f.got,
                            f.want);
        return pa::strf("%s is %lld, expected %lld (%lld entries of %lld bytes)", f.name, f.got, f.want, f.entries,
                        entry_bytes);
    }
    return "";
}

// Grades `plan` on every case; prints one line per case, a last line starting RESULT, and the
// --json result. Returns the exit code: 0 every case right, 1 one wrong (or an exception).
inline int grade_plan(const PlanFn& plan, const std::string& program, const std::string& build, uint64_t seed,
                      const std::string& json) {
    using pa::exercise::Outcome;
    pa::exercise::GradeReport report;
    report.program = program;
    report.build = build;
    report.exercise = "plan";
    report.seed = seed;
    report.gpu = "none (graded on the CPU)";
    const std::vector<PlanCase> cases = plan_cases(seed);
    std::printf("%s --grade --exercise plan: build '%s', seed %llu, on the CPU\n", program.c_str(), build.c_str(),
                static_cast<unsigned long long>(seed));
    std::printf("correctness: %zu batches (catalogue, seeded, edge) against the reference\n", cases.size());
    int failures = 0;
    double ragged = 0, padded = 0;
    for (const PlanCase& c : cases) {
        pa::exercise::CaseResult cr;
        cr.name = c.name;
        cr.group = c.group;
        try {
            cr.message = check_plan(c, plan(c.ctx, c.H, c.D, c.partition_size));
        } catch (const std::exception& e) {
            cr.message = std::string("plan_ragged threw: ") + e.what();
        }
        cr.pass = cr.message.empty();
        if (cr.pass) {
            const pa::reference::RaggedScratchRef r = pa::reference::ragged_scratch(c.ctx, c.H, c.D, c.partition_size);
            ragged += static_cast<double>(r.bytes);
            padded += static_cast<double>(r.padded_bytes);
            std::printf("  ok   %s\n", c.name.c_str());
        } else {
            ++failures;
            std::printf("  FAIL plan %s: %s [this case: %s]\n", c.name.c_str(), cr.message.c_str(), c.teaches.c_str());
        }
        report.cases.push_back(cr);
    }
    const int n = static_cast<int>(cases.size());
    if (failures == 0)
        std::printf("cost: over these batches the ragged scratch is %.1f%% of pad_scratch's bytes\n",
                    padded > 0 ? 100.0 * ragged / padded : 0.0);
    report.outcome = failures == 0 ? Outcome::pass : Outcome::wrong;
    report.summary = failures == 0
                         ? pa::strf("RESULT: PASS: %d/%d checks; speed not measured (a host-side plan)", n, n)
                         : pa::strf("RESULT: FAIL: %d of %d checks of the plan exercise failed", failures, n);
    std::printf("%s\n", report.summary.c_str());
    std::fflush(stdout);
    std::string err;
    if (!json.empty() && !pa::exercise::write_json(json, report, &err))
        std::fprintf(stderr, "error: %s: %s\n", program.c_str(), err.c_str());
    return pa::exercise::exit_code(report.outcome);
}

}  // namespace lesson04_exercise
