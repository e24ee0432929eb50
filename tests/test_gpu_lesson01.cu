// Lesson 01 (naive paged decode) on the GPU, against the double-precision reference.
// Every test here is labelled `gpu` by CMake and needs a visible CUDA GPU.
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <vector>

#include "gpu_cases.h"
#include "naive_decode.h"

namespace {

constexpr uint64_t kSeed = 20250101;  // printed in the test name: rerun a failure with it

pa::DecodeShape one_sequence(int ctx, int D, pa::DType t) {
    return pa::make_shape("long-B1-H2-Hkv1-D" + std::to_string(D) + "-ctx" + std::to_string(ctx), 2, 1, {ctx}, D, 16, t);
}

}  // namespace

TEST_CASE("lesson01 naive matches the reference on 60 random cases (seed 20250101)", "[gpu][lesson01]") {
    const auto r = pa::testing::check_variants_on_random_cases({lesson01::variant()}, kSeed, 60);
    CHECK(r.refused == 0);
    CHECK(r.checked == 60);
    CHECK(r.passed == r.checked);
}

TEST_CASE("lesson01 naive passes its default check shapes (seed 20241121)", "[gpu][lesson01]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeVariant v = lesson01::variant();
    for (const pa::DecodeShape& s : pa::decode_check_shapes()) {
        INFO(s.name);
        REQUIRE(v.why_not(s, info).empty());
        const pa::DecodeProblem p = pa::make_decode_problem(s, 20241121);
        pa::DeviceDecodeProblem dev(p);
        const pa::CheckResult r = pa::check_once(v, dev, p, pa::reference::softmax_decode(p));
        INFO("rel err " << r.rel_err << ": " << r.message);
        CHECK(r.pass);
    }
}

TEST_CASE("lesson01 refuses a context longer than shared memory holds, pointing at lesson 03", "[gpu][lesson01]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const int D = 128;
    // one float of logits per token, plus q: this is one token more than fits
    const int too_long = info.smem_per_block_optin / 4 - D + 1;
    const std::string why = lesson01::why_not(one_sequence(too_long, D, pa::DType::fp16), info);
    INFO("ctx " << too_long << " on " << info.name << ": '" << why << "'");
    CHECK(!why.empty());
    CHECK(why.find("lesson 03") != std::string::npos);
    CHECK(why.find(std::to_string(too_long)) != std::string::npos);
    // the variant the driver uses says the same
    CHECK(lesson01::variant().why_not(one_sequence(too_long, D, pa::DType::fp16), info) == why);
    CHECK(lesson01::why_not(one_sequence(4096, D, pa::DType::fp16), info).empty());
}

TEST_CASE("lesson01 runs the longest context its why_not accepts", "[gpu][lesson01]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeVariant v = lesson01::variant();
    const int D = 128;
    // the largest ctx with smem_bytes(D, ctx) <= the opt-in limit: why_not accepts it,
    // so the launch must succeed (a shape is refused by name or run, never failed at launch)
    int ctx = info.smem_per_block_optin / 4 - D;
    while (!v.why_not(one_sequence(ctx, D, pa::DType::bf16), info).empty()) --ctx;
    REQUIRE(v.why_not(one_sequence(ctx + 1, D, pa::DType::bf16), info).find("lesson 03") != std::string::npos);
    const pa::DecodeShape s = one_sequence(ctx, D, pa::DType::bf16);
    INFO(s.name << " (" << lesson01::smem_bytes(D, ctx) << " bytes of dynamic shared memory, opt-in limit "
                << info.smem_per_block_optin << ")");
    const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
    pa::DeviceDecodeProblem dev(p);
    pa::CheckResult r;
    REQUIRE_NOTHROW(r = pa::check_once(v, dev, p, pa::reference::softmax_decode(p)));
    INFO("rel err " << r.rel_err << ": " << r.message);
    CHECK(r.pass);
}

TEST_CASE("the check fails a launcher that leaves the output unwritten (poisoned)", "[gpu][harness]") {
    pa::testing::gpu_for_test();
    // A kernel that wrote nothing must not pass on what an earlier run left in the buffer:
    // run the real kernel first, then a launcher that does nothing.
    const pa::DecodeProblem p = pa::make_decode_problem(one_sequence(100, 64, pa::DType::fp16), kSeed);
    const std::vector<double> ref = pa::reference::softmax_decode(p);
    pa::DeviceDecodeProblem dev(p);
    REQUIRE(pa::check_once(lesson01::variant(), dev, p, ref).pass);
    pa::DecodeVariant lazy = lesson01::variant();
    lazy.name = "writes-nothing";
    lazy.launch = [](const pa::PagedDecodeArgs&, cudaStream_t) {};
    const pa::CheckResult r = pa::check_once(lazy, dev, p, ref);
    CHECK(!r.pass);
    CHECK(r.nan_count == static_cast<long long>(ref.size()));
}
