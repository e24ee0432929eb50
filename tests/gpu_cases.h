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

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "decode_driver.cuh"
#include "device_buffer.cuh"
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

// Launches `v` on two streams that may run at the same time, over two problems, `rounds`
// times with no synchronization in between, every launch writing an output of its own, and
// checks each output bit for bit against its problem's output of a launch alone on the
// default stream. A variant whose scratch (split-k's partials, merge counters, order tables)
// the two streams shared would have one stream's launches overwrite what the other's still
// read. Then the same once more with the first stream destroyed right after its launches, its
// work still running, before the second is created (which may get the first one's handle,
// but not its scratch). Only for variants whose bits do not depend on the order in which
// CTAs finish.
inline void check_two_streams(const DecodeVariant& v, const DecodeShape& sa, const DecodeShape& sb, uint64_t seed,
                              int rounds = 6) {
    const DecodeProblem prob_a = make_decode_problem(sa, seed), prob_b = make_decode_problem(sb, seed + 1);
    DeviceDecodeProblem da(prob_a), db(prob_b);
    INFO(v.name << " on " << sa.name << " and " << sb.name << " (seed " << seed << ")");
    v.launch(da.args(), nullptr);
    v.launch(db.args(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> want_a = da.download_output(), want_b = db.download_output();
    const size_t na = want_a.size(), nb = want_b.size();
    DeviceBuffer<uint16_t> outs_a(na * rounds), outs_b(nb * rounds);  // [rounds][B, H, D] each
    auto launch_rounds = [&](DeviceDecodeProblem& d, DeviceBuffer<uint16_t>& outs, size_t n, cudaStream_t st) {
        for (int r = 0; r < rounds; ++r) {
            PagedDecodeArgs a = d.args();
            a.out = outs.get() + r * n;
            v.launch(a, st);
        }
    };
    auto check_rounds = [&](const char* phase) {
        const std::vector<uint16_t> got_a = outs_a.download(), got_b = outs_b.download();
        for (int r = 0; r < rounds; ++r) {
            INFO(phase << ", round " << r);
            CHECK(std::equal(want_a.begin(), want_a.end(), got_a.begin() + r * na));
            CHECK(std::equal(want_b.begin(), want_b.end(), got_b.begin() + r * nb));
        }
    };
    auto poison = [&] {
        outs_a.fill_bytes(0xff);
        outs_b.fill_bytes(0xff);
        CUDA_CHECK(cudaDeviceSynchronize());  // the streams below do not wait for the default stream's fills
    };
    cudaStream_t s1 = nullptr, s2 = nullptr;
    poison();
    CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    for (int r = 0; r < rounds; ++r) {  // interleaved, so that both streams have work queued at once
        PagedDecodeArgs a = da.args(), b = db.args();
        a.out = outs_a.get() + r * na;
        b.out = outs_b.get() + r * nb;
        v.launch(a, s1);
        v.launch(b, s2);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaStreamDestroy(s1));
    CUDA_CHECK(cudaStreamDestroy(s2));
    check_rounds("two streams");
    poison();
    CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    launch_rounds(da, outs_a, na, s1);
    CUDA_CHECK(cudaStreamDestroy(s1));  // its launches still run
    CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    launch_rounds(db, outs_b, nb, s2);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaStreamDestroy(s2));
    check_rounds("the first stream destroyed before the second is created");
}

}  // namespace pa::testing
