// The GPU side of the random decode cases: run a lesson's variants over them and
// check each against the double-precision reference. Every decode lesson's GPU test
// calls check_variants_on_random_cases with its own variants, e.g.
//
//   auto r = pa::testing::check_variants_on_random_cases({lesson02::variant(8)}, 1102, 60);
//   REQUIRE(r.checked == 60);
//
// Each run goes through pa::check_once, which poisons the output (NaN) before the launch,
// so an element a kernel never writes fails. The problems put NaN in every cache slot no
// sequence owns, so a kernel that reads past a sequence's end fails too.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <functional>
#include <string>
#include <vector>

#include "decode_driver.cuh"
#include "decode_reference.h"
#include "device_info.cuh"
#include "random_cases.h"

namespace pa::testing {

// The GPU this test runs on. gpu-labelled tests only run where a GPU is visible, so a
// missing one is a failure, never a skip.
inline DeviceInfo gpu_for_test() {
    std::string why;
    if (!gpu_available(&why)) FAIL("no usable CUDA GPU (" << why << "); the gpu-labelled tests need one");
    return require_gpu("tests");
}

struct RandomCheckSummary {
    int cases = 0;    // random cases generated
    int checked = 0;  // (case, variant) pairs launched and compared
    int passed = 0;
    int refused = 0;  // (case, variant) pairs a variant's why_not refused
};

struct RandomCheckOptions {
    // A variant refusing a case fails the test unless this returns true for it (a later
    // lesson whose variant has a documented limit says so here; nothing is skipped silently).
    std::function<bool(const DecodeVariant&, const DecodeShape&)> may_refuse;
    // Reference to compare with; the softmax decode unless a lesson says otherwise.
    DecodeReference reference = [](const DecodeProblem& p) { return reference::softmax_decode(p); };
    // Every `cold_copy_every`-th case also runs on copy 1 of a two-copy problem (the
    // buffers the L2-cold timing rotates through); 0 turns that off.
    int cold_copy_every = 5;
};

// Runs every variant on `count` random cases drawn from `seed`, with CHECKs that say
// which case (seed, shape, lengths) and which variant failed. Returns the counts.
inline RandomCheckSummary check_variants_on_random_cases(const std::vector<DecodeVariant>& variants, uint64_t seed,
                                                         int count, const RandomCaseLimits& limits = {},
                                                         const RandomCheckOptions& options = {}) {
    const DeviceInfo info = gpu_for_test();
    RandomCheckSummary sum;
    const std::vector<RandomCase> cases = random_decode_cases(seed, count, limits);
    sum.cases = static_cast<int>(cases.size());
    for (const RandomCase& c : cases) {
        INFO("case " << c.index << " of seed " << seed << ": " << c.describe());
        const DecodeProblem p = make_decode_problem(c.shape, c.seed);
        const std::vector<double> ref = options.reference(p);
        const bool cold = options.cold_copy_every > 0 && c.index % options.cold_copy_every == options.cold_copy_every - 1;
        DeviceDecodeProblem dev(p, cold ? 2 : 1);
        for (const DecodeVariant& v : variants) {
            INFO("variant " << v.name);
            const std::string why = v.why_not(c.shape, info);
            if (!why.empty()) {
                ++sum.refused;
                INFO("refused: " << why);
                CHECK((options.may_refuse && options.may_refuse(v, c.shape)));
                continue;
            }
            for (int copy = 0; copy < (cold ? 2 : 1); ++copy) {
                INFO("K/V copy " << copy);
                const CheckResult r = check_once(v, dev, p, ref, copy);
                INFO("rel err " << r.rel_err << ", max abs err " << r.max_abs_err << ": " << r.message);
                CHECK(r.pass);
                if (copy == 0) {
                    ++sum.checked;
                    sum.passed += r.pass ? 1 : 0;
                }
            }
        }
    }
    return sum;
}

}  // namespace pa::testing
