// Lesson 02's ladder (thread groups, wide loads, the grouped CTA's steps: its logits, the
// online softmax, the cp.async ring, V owners with the ring in both mappings; tensor cores,
// copy warps; the automatic choice) on the GPU, against the double-precision reference.
// Every test here is labelled `gpu`.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "gpu_cases.h"
#include "lesson02.h"
#include "timeline.h"

namespace {

constexpr uint64_t kSeed = 20250202;  // printed in the test names: rerun a failure with it

std::vector<pa::DecodeVariant> variants_named(const std::vector<std::string>& names) {
    std::vector<pa::DecodeVariant> out;
    for (const auto& v : lesson02::all_variants())
        for (const auto& n : names)
            if (v.name == n) out.push_back(v);
    REQUIRE(out.size() == names.size());
    return out;
}

}  // namespace

TEST_CASE("lesson02 steps 1 and 2, every TGS, match the reference on 60 random cases (seed 20250202)", "[gpu][lesson02]") {
    const auto r = pa::testing::check_variants_on_random_cases(
        variants_named({"thread_groups_tgs4", "thread_groups_tgs8", "thread_groups_tgs16", "wide_loads_tgs4",
                        "wide_loads_tgs8", "wide_loads_tgs16"}),
        kSeed, 60);
    CHECK(r.checked >= 360);
    CHECK(r.passed == r.checked);
    CHECK(r.refused == 0);
}

// Step 3 keeps every head's logits of the whole context in shared memory and refuses, by
// name, a context whose logits do not fit (random cases reach ctx 2000 with 32 heads).
bool logits_refusal(const pa::DecodeVariant& v, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return v.name == "grouped_logits_tgs8" && v.why_not(s, info).find("logits") != std::string::npos;
}

TEST_CASE("lesson02 steps 3, 4 and 5 (grouped_logits, online_softmax, cp_async_ring) match the reference on 60 random "
          "cases (seed 20250202)",
          "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    pa::testing::RandomCheckOptions options;
    options.may_refuse = [&](const pa::DecodeVariant& v, const pa::DecodeShape& s) { return logits_refusal(v, s, info); };
    const auto r = pa::testing::check_variants_on_random_cases(
        variants_named({"grouped_logits_tgs8", "online_softmax_tgs8", "cp_async_ring_tgs8"}), kSeed, 60, {}, options);
    CHECK(r.checked + r.refused == 180);
    CHECK(r.checked >= 150);
    CHECK(r.passed == r.checked);
}

// Steps 3 to 5 on named shapes: mixed lengths in one batch, ctx 1, contexts that are not a
// multiple of the 16 (steps 3, 4) or 32 (step 5) tokens a CTA step takes, contexts that cross
// the chunks of steps 4 and 5 (1024 tokens at 8 heads a CTA, 256 at 32), GQA, MQA, MHA, a
// group of 6 run as 8, every D and page size.
TEST_CASE("lesson02 steps 3, 4 and 5 on mixed, uneven and chunk-crossing contexts, GQA and MQA", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    const pa::DecodeShape shapes[] = {
        pa::make_shape("gqa4-mixed", 16, 4, {1, 17, 100, 129, 300, 1000}, 128, 16, b),
        pa::make_shape("mqa-g32", 32, 1, {1, 31, 33, 250, 1025}, 128, 16, f),
        pa::make_shape("mha-D256", 4, 4, {1, 37, 513}, 256, 32, b),
        pa::make_shape("g2-D64-pages8", 4, 2, {3, 65, 129, 1}, 64, 8, f),
        pa::make_shape("g8-chunks", 16, 2, {1023, 1024, 1025, 2500}, 128, 16, b),
        pa::make_shape("g6-as-8", 12, 2, {700, 1030, 1}, 128, 16, f),
        pa::make_shape("g8-D256-pages32", 8, 1, {11, 300, 65}, 256, 32, f),
    };
    const auto variants = variants_named({"grouped_logits_tgs8", "online_softmax_tgs8", "cp_async_ring_tgs8"});
    for (const auto& s : shapes) {
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 8);
        const std::vector<double> ref = pa::reference::softmax_decode(p);
        pa::DeviceDecodeProblem dev(p);
        for (const auto& v : variants) {
            INFO(v.name << " on " << s.name);
            REQUIRE(v.why_not(s, info).empty());  // every one fits a GPU with 163+ KiB a CTA
            const pa::CheckResult r = pa::check_once(v, dev, p, ref);
            INFO(r.message);
            CHECK(r.pass);
        }
    }
}

// Step 3 refuses by name the context whose logits do not fit; step 4, its online softmax,
// runs it.
TEST_CASE("lesson02 step 3 refuses logits that do not fit; step 4 runs the same shape", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeShape s = pa::make_shape("mqa-g32-ctx4000", 32, 1, {4000, 17}, 128, 16, pa::DType::bf16);
    const auto v = variants_named({"grouped_logits_tgs8", "online_softmax_tgs8"});
    const std::string why = v[0].why_not(s, info);
    INFO(why);
    CHECK(why.find("logits of 32 heads") != std::string::npos);
    REQUIRE(v[1].why_not(s, info).empty());
    const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 9);
    pa::DeviceDecodeProblem dev(p);
    const pa::CheckResult r = pa::check_once(v[1], dev, p, pa::reference::softmax_decode(p));
    INFO(r.message);
    CHECK(r.pass);
}

TEST_CASE("lesson02 step 6 per_head, every TGS, matches the reference on 60 random cases (seed 20250202)", "[gpu][lesson02]") {
    const auto r = pa::testing::check_variants_on_random_cases(
        variants_named({"per_head_tgs4", "per_head_tgs8", "per_head_tgs16"}), kSeed, 60);
    CHECK(r.checked >= 180);
    CHECK(r.passed == r.checked);
    CHECK(r.refused == 0);
}

TEST_CASE("lesson02 step 6 grouped, every TGS, matches the reference on 60 random cases (seed 20250202)", "[gpu][lesson02]") {
    const auto r = pa::testing::check_variants_on_random_cases(
        variants_named({"grouped_tgs4", "grouped_tgs8", "grouped_tgs16"}), kSeed, 60);
    CHECK(r.checked >= 180);
    CHECK(r.passed == r.checked);
    CHECK(r.refused == 0);
}

TEST_CASE("lesson02 steps 7 and 8 (tile_stream, grouped_mma_qk) match the reference on 60 random cases (seed 20250205)",
          "[gpu][lesson02]") {
    const auto r = pa::testing::check_variants_on_random_cases(variants_named({"tile_stream", "grouped_mma_qk"}), kSeed + 3,
                                                               60);
    CHECK(r.checked >= 120);
    CHECK(r.passed == r.checked);
    CHECK(r.refused == 0);
}

// Steps 7 and 8 on named shapes: mixed lengths in one batch, ctx 1, contexts that end inside
// a 16 KiB tile (128 tokens at D 64, 64 at D 128, 32 at D 256) or one token past it, MHA, MQA
// (group 32), a group of 6 run as 8, a group of 16, every D and page size; and their shared
// memory fits the 99 KiB a CTA gets on sm_86 / sm_89 for every D and group.
TEST_CASE("lesson02 steps 7 and 8 on mixed and uneven contexts, every D, page size and group; 99 KiB a CTA",
          "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    const pa::DecodeShape shapes[] = {
        pa::make_shape("gqa4-mixed", 16, 4, {1, 17, 64, 65, 129, 300, 1000}, 128, 16, b),
        pa::make_shape("mqa-g32", 32, 1, {1, 31, 33, 250, 1025}, 128, 16, f),
        pa::make_shape("mha-D256", 4, 4, {1, 32, 33, 513}, 256, 32, b),
        pa::make_shape("mha-D64-pages8", 4, 4, {1, 127, 128, 129, 300}, 64, 8, f),
        pa::make_shape("g2-D64-pages8", 4, 2, {3, 65, 129, 1}, 64, 8, f),
        pa::make_shape("g6-as-8", 12, 2, {700, 1030, 1}, 128, 16, f),
        pa::make_shape("g16-D64-pages32", 32, 2, {1, 255, 257}, 64, 32, b),
        pa::make_shape("g8-D256-pages32", 8, 1, {11, 300, 65}, 256, 32, f),
    };
    const auto variants = variants_named({"tile_stream", "grouped_mma_qk"});
    REQUIRE(variants.size() == 2);
    for (const auto& s : shapes) {
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 10);
        const std::vector<double> ref = pa::reference::softmax_decode(p);
        pa::DeviceDecodeProblem dev(p);
        for (const auto& v : variants) {
            INFO(v.name << " on " << s.name);
            REQUIRE(v.why_not(s, info).empty());
            const pa::CheckResult r = pa::check_once(v, dev, p, ref);
            INFO(r.message);
            CHECK(r.pass);
        }
    }
    for (const auto& v : variants)
        for (int D : {64, 128, 256})
            for (int group : {1, 2, 4, 6, 8, 16, 32}) {
                INFO(v.name << " D " << D << " group " << group);
                const pa::DecodeShape s = pa::make_shape("smem", group, 1, {100}, D, 16, pa::DType::bf16);
                CHECK(v.geometry(s, info).smem_bytes <= 96 * 1024);  // + static arrays: under 99 KiB
            }
    const pa::DecodeShape g64 = pa::make_shape("g64", 64, 1, {10}, 128, 16, pa::DType::fp16);
    for (const auto& v : variants) CHECK(v.why_not(g64, info).find("group 64") != std::string::npos);
}

TEST_CASE("lesson02 steps 9 and 10 (tensor cores) and auto match the reference on 60 random cases (seed 20250205)",
          "[gpu][lesson02]") {
    const auto r = pa::testing::check_variants_on_random_cases(variants_named({"grouped_mma", "grouped_mma_ws", "auto"}),
                                                               kSeed + 3, 60);
    CHECK(r.checked >= 180);
    CHECK(r.passed == r.checked);
    CHECK(r.refused == 0);
}

// Step 11 needs sm_90 and an sm_90 build; elsewhere it must refuse by name, never run.
bool bulk_runs_here(const pa::DeviceInfo& info) {
    const pa::DecodeShape s = pa::make_shape("probe", 8, 1, {100});
    const std::string why = lesson02::why_not({lesson02::Step::grouped_mma_bulk}, s, info);
    if (!why.empty()) {
        INFO(why);
        CHECK(why.find("sm_90") != std::string::npos);
    }
    return why.empty();
}

// The refusals lesson 02 documents beyond shared memory and group size: step 3 on logits that
// do not fit, steps 11 to 14 off sm_90 (or in a build without sm_90 code), steps 12 to 14 on
// pages smaller than their units, and step 14 on groups above 8.
bool documented_refusal(const pa::DecodeVariant& v, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    if (logits_refusal(v, s, info)) return true;
    const bool two_streams = v.name == "grouped_mma_two_streams";
    const bool units = v.name == "grouped_mma_units" || v.name == "grouped_mma_aligned" || two_streams;
    if (v.name != "grouped_mma_bulk" && !units) return false;
    if (!bulk_runs_here(info)) return true;
    if (two_streams && s.group() > 8) return true;
    return units && s.block_size < lesson02::step10::tile_tokens(s.D) / 8;
}

TEST_CASE("lesson02 step 11 (bulk rows) matches the reference on 60 random cases (seed 20250205)", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    if (!bulk_runs_here(info)) SKIP("step 11 needs sm_90 and an sm_90 build");
    const auto r = pa::testing::check_variants_on_random_cases(variants_named({"grouped_mma_bulk"}), kSeed + 3, 60);
    CHECK(r.checked >= 60);
    CHECK(r.passed == r.checked);
    CHECK(r.refused == 0);
}

// Steps 12 and 13 refuse pages smaller than their units (8 tokens at D 64 and 128) by name and
// run the rest; contexts that end inside a unit, inside a tile, or at 1 token are among them.
void check_unit_step(const std::string& name, lesson02::Step step, const pa::DeviceInfo& info) {
    pa::testing::RandomCheckOptions options;
    options.may_refuse = [&](const pa::DecodeVariant& v, const pa::DecodeShape& s) { return documented_refusal(v, s, info); };
    const auto r = pa::testing::check_variants_on_random_cases(variants_named({name}), kSeed + 3, 60, {}, options);
    CHECK(r.checked >= 30);
    CHECK(r.passed == r.checked);
    const lesson02::Config config{step};
    const pa::DecodeShape small_pages = pa::make_shape("pages-of-8", 8, 4, {100}, 128, 8, pa::DType::fp16);
    CHECK(lesson02::why_not(config, small_pages, info).find("pages of 8") != std::string::npos);
    const pa::DecodeShape d256 = pa::make_shape("d256-pages-of-8", 8, 4, {100}, 256, 8, pa::DType::fp16);
    CHECK(lesson02::why_not(config, d256, info).empty());  // 8-token units at D 256
    for (const int ctx : {1, 15, 16, 17, 127, 128, 129, 255, 1000}) {
        const pa::DecodeShape s = pa::make_shape("units-ctx" + std::to_string(ctx), 16, 2, {ctx, ctx / 2 + 1}, 128, 16,
                                                 pa::DType::bf16);
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 7);
        pa::DeviceDecodeProblem dev(p);
        const pa::CheckResult res = pa::check_once(variants_named({name})[0], dev, p, pa::reference::softmax_decode(p));
        INFO(name << " " << s.name << ": " << res.message);
        CHECK(res.pass);
    }
}

TEST_CASE("lesson02 step 12 (unit copies) matches the reference on 60 random cases (seed 20250205)", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    if (!bulk_runs_here(info)) SKIP("step 12 needs sm_90 and an sm_90 build");
    check_unit_step("grouped_mma_units", lesson02::Step::grouped_mma_units, info);
    const pa::DecodeShape small_pages = pa::make_shape("pages-of-8", 8, 4, {100}, 128, 8, pa::DType::fp16);
    CHECK(lesson02::config_name(lesson02::auto_config(small_pages, info)) == "grouped_mma_ws");  // 4 CTAs: one per SM
}

TEST_CASE("lesson02 step 13 (aligned units) matches the reference on 60 random cases (seed 20250205)", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    if (!bulk_runs_here(info)) SKIP("step 13 needs sm_90 and an sm_90 build");
    check_unit_step("grouped_mma_aligned", lesson02::Step::grouped_mma_aligned, info);
}

// Step 14 splits each context's tiles between two streams: contexts of 1 tile (the second
// stream idle), of an odd number of tiles, ending mid-tile and mid-unit, every D and dtype.
TEST_CASE("lesson02 step 14 (two streams) matches the reference on 60 random cases (seed 20250205)", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    if (!bulk_runs_here(info)) SKIP("step 14 needs sm_90 and an sm_90 build");
    check_unit_step("grouped_mma_two_streams", lesson02::Step::grouped_mma_two_streams, info);
    const lesson02::Config config{lesson02::Step::grouped_mma_two_streams};
    CHECK(lesson02::why_not(config, pa::make_shape("g16", 16, 1, {100}), info).find("group 16") != std::string::npos);
    for (const int D : {64, 128, 256})
        for (const pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
            const pa::DecodeShape s = pa::make_shape("two-streams-D" + std::to_string(D), 16, 4, {1, 128, 129, 385, 640, 3000}, D,
                                                     16, t);
            const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 8);
            pa::DeviceDecodeProblem dev(p);
            const pa::CheckResult r = pa::check_once(variants_named({"grouped_mma_two_streams"})[0], dev, p,
                                                     pa::reference::softmax_decode(p));
            INFO(s.name << " " << pa::dtype_name(t) << ": " << r.message);
            CHECK(r.pass);
        }
}

// A grid larger than the GPU with one 8-head column block takes step 10's two-CTAs-per-SM
// layout (a 3-slot ring), and step 11's: check both for every D and both dtypes, groups 1, 2
// and 8, with contexts that end inside a tile, and that two CTAs really fit on an SM.
TEST_CASE("lesson02 grouped_mma_ws and grouped_mma_bulk with two CTAs per SM (grids larger than the GPU)",
          "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    std::vector<std::string> names = {"grouped_mma_ws"};
    if (bulk_runs_here(info)) {
        names.push_back("grouped_mma_bulk");
        names.push_back("grouped_mma_units");
        names.push_back("grouped_mma_aligned");
    }
    // a grid that fits the GPU, and 16 heads a CTA: one CTA per SM
    CHECK(lesson02::step10::geometry(pa::make_shape("fits", 8, 1, std::vector<int>(info.sms, 100)), info).ctas_per_sm == 1);
    CHECK(lesson02::step10::geometry(pa::make_shape("g16", 16, 1, std::vector<int>(info.sms + 1, 100)), info).ctas_per_sm == 1);
    if (names.size() > 1) {  // step 12: the shallow ring once the grid covers 90 % of the SMs, the deep one below
        CHECK(lesson02::step12::geometry(pa::make_shape("fits", 8, 1, std::vector<int>(info.sms, 100)), info).ctas_per_sm == 2);
        CHECK(lesson02::step12::geometry(pa::make_shape("half", 8, 1, std::vector<int>(info.sms / 2, 100)), info).ctas_per_sm == 1);
        CHECK(lesson02::step12::ctas_per_sm(pa::make_shape("g16", 16, 1, std::vector<int>(info.sms, 100)), info) == 1);
    }
    const int dims[] = {64, 128, 256};
    const int groups[] = {1, 2, 8};
    int runs = 0;
    for (const int D : dims)
        for (const int group : groups)
            for (const pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
                const int Hkv = 4, B = info.sms / Hkv + 1;  // B * Hkv > SMs
                std::vector<int> ctx;
                for (int b = 0; b < B; ++b) ctx.push_back(1 + (b * 37) % 300);  // 1 .. 297, mostly mid-tile
                const pa::DecodeShape s =
                    pa::make_shape("two-per-sm-D" + std::to_string(D) + "-g" + std::to_string(group), Hkv * group, Hkv, ctx, D, 16, t);
                INFO(s.name << " " << pa::dtype_name(t));
                CHECK(lesson02::step10::geometry(s, info).ctas_per_sm == 2);
                if (names.size() > 1) {
                    CHECK(lesson02::step11::geometry(s, info).ctas_per_sm == 2);
                    CHECK(lesson02::step12::geometry(s, info).ctas_per_sm == 2);
                    CHECK(lesson02::step13::geometry(s, info).ctas_per_sm == 2);
                }
                const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 4);
                pa::DeviceDecodeProblem dev(p);
                const auto want = pa::reference::softmax_decode(p);
                for (const pa::DecodeVariant& v : variants_named(names)) {
                    const pa::CheckResult r = pa::check_once(v, dev, p, want);
                    INFO(v.name << ": " << r.message);
                    CHECK(r.pass);
                }
                ++runs;
            }
    CHECK(runs == 18);
}

// The timeline build (lesson02 --timeline) is the same kernel plus clock reads: it must
// write the same output bit for bit, and a record that summarize_timeline accepts (every
// CTA's tiles in order, between its start and its end), for one and two CTAs per SM.
TEST_CASE("lesson02 grouped_mma_ws's timeline build: the same output and an ordered record", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    std::vector<int> mixed;
    for (int b = 0; b < info.sms / 4 + 1; ++b) mixed.push_back(1 + (b * 53) % 700);
    const pa::DecodeShape shapes[] = {
        pa::make_shape("timeline-g8", 16, 2, {1, 130, 517}, 128, 16, pa::DType::fp16),
        pa::make_shape("timeline-g32", 32, 1, {300, 77}, 128, 32, pa::DType::bf16),
        pa::make_shape("timeline-two-per-sm", 4, 4, mixed, 128, 16, pa::DType::bf16),  // B * Hkv > SMs
    };
    const pa::DecodeVariant mma = variants_named({"grouped_mma_ws"})[0];
    for (const auto& s : shapes) {
        INFO(s.name);
        REQUIRE(lesson02::step10::timeline_why_not(s, info).empty());
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 6);
        pa::DeviceDecodeProblem dev(p);
        const pa::CheckResult r = pa::check_once(mma, dev, p, pa::reference::softmax_decode(p));
        REQUIRE(r.pass);
        const std::vector<uint16_t> plain = dev.download_output();

        const int tile = lesson02::step10::tile_tokens(s.D);
        const int stride = pa::timeline_stride(s.max_ctx(), tile);
        pa::DeviceBuffer<uint64_t> record(static_cast<size_t>(s.B) * s.Hkv * stride);
        dev.poison_output();
        lesson02::step10::launch_timeline(dev.args(), record.get(), stride, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        CHECK(dev.download_output() == plain);
        const pa::TimelineSummary t = pa::summarize_timeline(record.download(), stride, s.Hkv, s.ctx, tile, s.D * 2);
        CHECK(t.ctas == s.B * s.Hkv);
        CHECK(t.bytes == static_cast<double>(s.kv_bytes()));
        CHECK(t.landed_all <= t.end_last);
        CHECK(t.sms_used >= std::min(t.ctas, info.sms) / 2);
    }
    CHECK(lesson02::step10::timeline_why_not(pa::make_shape("timeline-d64", 8, 1, {10}, 64, 16, pa::DType::fp16), info) != "");
}

// The group-mask trap: contexts that are not a multiple of the tokens a CTA step takes,
// for every TGS and both mappings, and contexts that cross the chunk boundaries.
TEST_CASE("lesson02 every variant passes the uneven-step and chunk-crossing shapes", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    std::vector<pa::DecodeShape> shapes = lesson02::uneven_check_shapes();
    for (const auto& s : pa::decode_check_shapes()) shapes.push_back(s);
    int runs = 0, refused = 0;
    for (const auto& s : shapes) {
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        const std::vector<double> ref = pa::reference::softmax_decode(p);
        pa::DeviceDecodeProblem dev(p);
        for (const auto& v : lesson02::all_variants()) {
            INFO(v.name << " on " << s.name);
            const std::string why = v.why_not(s, info);
            INFO(why);
            if (documented_refusal(v, s, info) && !why.empty()) {
                ++refused;
                continue;
            }
            CHECK(why.empty());  // every other step runs every check shape on an sm_80+ GPU with 163+ KiB a CTA
            if (!why.empty()) continue;
            const pa::CheckResult r = pa::check_once(v, dev, p, ref);
            INFO(r.message);
            CHECK(r.pass);
            ++runs;
        }
    }
    CHECK(runs + refused == static_cast<int>(shapes.size() * lesson02::all_variants().size()));
    CHECK(refused <= 3 * static_cast<int>(shapes.size()));  // steps 3, 11 and 12 at most
}

TEST_CASE("lesson02 every context length 1..70 for every step and TGS", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();  // fails, never skips, without a GPU
    const auto variants = lesson02::all_variants();
    std::vector<int> ctx;
    for (int c = 1; c <= 70; ++c) ctx.push_back(c);
    const pa::DecodeShape s = pa::make_shape("ctx-1-to-70", 8, 2, ctx, 128, 16, pa::DType::bf16);
    const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed + 2);
    const std::vector<double> ref = pa::reference::softmax_decode(p);
    pa::DeviceDecodeProblem dev(p);
    for (const auto& v : variants) {
        INFO(v.name);
        if (documented_refusal(v, s, info) && !v.why_not(s, info).empty()) continue;  // steps 11 and 12 off sm_90
        REQUIRE(v.why_not(s, info).empty());
        const pa::CheckResult r = pa::check_once(v, dev, p, ref);
        INFO(r.message);
        CHECK(r.pass);
    }
}

TEST_CASE("lesson02 grouped refuses a group above 32 by name; per_head runs it", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();  // fails, never skips, without a GPU
    pa::DecodeShape s = pa::make_decode_shape("g64", 2, 64, 1, 100, pa::DType::fp16);
    const lesson02::Config grouped{lesson02::Step::grouped, lesson02::Mapping::grouped, 8};
    CHECK(lesson02::why_not(grouped, s, info).find("group 64") != std::string::npos);
    for (const lesson02::Step st : {lesson02::Step::grouped_logits, lesson02::Step::online_softmax, lesson02::Step::cp_async_ring})
        CHECK(lesson02::why_not({st, lesson02::Mapping::grouped, 8}, s, info).find("group 64") != std::string::npos);
    CHECK(lesson02::why_not({lesson02::Step::grouped_mma}, s, info).find("group 64") != std::string::npos);
    CHECK(lesson02::why_not({lesson02::Step::grouped_mma_ws}, s, info).find("group 64") != std::string::npos);
    CHECK(lesson02::why_not({lesson02::Step::grouped_mma_bulk}, s, info).find("group 64") != std::string::npos);
    CHECK(lesson02::why_not({lesson02::Step::grouped_mma_units}, s, info).find("group 64") != std::string::npos);
    const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
    pa::DeviceDecodeProblem dev(p);
    const pa::CheckResult res = pa::check_once(lesson02::variant({lesson02::Step::grouped, lesson02::Mapping::per_head, 8}),
                                               dev, p, pa::reference::softmax_decode(p));
    INFO(res.message);
    CHECK(res.pass);
    CHECK(lesson02::config_name(lesson02::auto_config(s, info)) == "per_head_tgs4");
}

TEST_CASE("lesson02 auto follows its stated rule", "[gpu][lesson02]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    auto picks = [&](int B, int H, int Hkv, const pa::DeviceInfo& gpu) {
        const pa::DecodeShape s = pa::make_shape("rule", H, Hkv, std::vector<int>(B, 1000));
        return lesson02::config_name(lesson02::auto_config(s, gpu));
    };
    // the grouped tensor-core CTA by default, MHA included (on a GPU where its ring fits: 163+
    // KiB a CTA): step 12 on sm_90 (pages of 16 here), else step 10
    REQUIRE(info.smem_per_block_optin >= 163 * 1024);
    REQUIRE(info.sms >= 128);
    const std::string grouped = bulk_runs_here(info) ? "grouped_mma_units" : "grouped_mma_ws";
    CHECK(picks(16, 64, 8, info) == grouped);    // llama70b-B16
    CHECK(picks(1, 64, 8, info) == grouped);     // 8 grouped CTAs
    CHECK(picks(16, 32, 1, info) == grouped);    // MQA, 16 grouped CTAs
    CHECK(picks(1, 8, 4, info) == grouped);      // 4 grouped CTAs: the smallest grid it takes
    CHECK(picks(4, 32, 32, info) == grouped);    // MHA, 128 CTAs (<= SMs: one per SM)
    CHECK(picks(16, 64, 4, info) == grouped);    // 64 CTAs of 16 heads: one per SM
    // a grid of 8-head CTAs at least kGridOverSms times the SMs: step 13 on sm_90
    const std::string aligned = bulk_runs_here(info) ? "grouped_mma_aligned" : "grouped_mma_ws";
    // B * Hkv at the threshold, with Hkv 1
    const int shared_b = static_cast<int>(std::ceil(lesson02::step13::kGridOverSms * info.sms));
    CHECK(picks(128, 32, 32, info) == aligned);  // MHA, 4096 CTAs
    CHECK(picks(shared_b, 8, 1, info) == aligned);
    CHECK(picks(shared_b - 1, 8, 1, info) == grouped);
    CHECK(picks(24, 64, 8, info) == aligned);    // 192 CTAs, past the threshold on 128 to 174 SMs
    CHECK(picks(2 * info.sms, 32, 1, info) == grouped);  // MQA: 32 heads a CTA
    // 8-head CTAs covering 0.7 to 1 times the SMs with a context of 2048 tokens or more: step 14
    auto picks_ctx = [&](int B, int H, int Hkv, int ctx) {
        const pa::DecodeShape s = pa::make_shape("rule-ctx", H, Hkv, std::vector<int>(B, ctx));
        return lesson02::config_name(lesson02::auto_config(s, info));
    };
    const std::string two_streams = bulk_runs_here(info) ? "grouped_mma_two_streams" : "grouped_mma_ws";
    const int most_b = info.sms, fewest_b = static_cast<int>(std::ceil(lesson02::step14::kMinGridOfSms * info.sms));
    CHECK(picks_ctx(16, 64, 8, 8192) == two_streams);  // llama70b-B16-ctx8k: 128 CTAs
    CHECK(picks_ctx(most_b, 8, 1, lesson02::step14::kMinContext) == two_streams);
    CHECK(picks_ctx(fewest_b, 8, 1, lesson02::step14::kMinContext) == two_streams);
    CHECK(picks_ctx(fewest_b - 1, 8, 1, 8192) == grouped);
    CHECK(picks_ctx(most_b + 1, 8, 1, 8192) == grouped);  // one SM with two CTAs: step 12 (below step 13's 1.1)
    CHECK(picks_ctx(most_b, 8, 1, lesson02::step14::kMinContext - 1) == grouped);
    CHECK(picks_ctx(most_b, 16, 1, 8192) == grouped);  // 16 heads a CTA
    // pages of 8 (smaller than step 12's units): step 11 where step 10 runs two CTAs per SM, else step 10
    auto picks_pages8 = [&](int B, int H, int Hkv) {
        const pa::DecodeShape s = pa::make_shape("rule8", H, Hkv, std::vector<int>(B, 1000), 128, 8, pa::DType::fp16);
        return lesson02::config_name(lesson02::auto_config(s, info));
    };
    const std::string two_per_sm = bulk_runs_here(info) ? "grouped_mma_bulk" : "grouped_mma_ws";
    CHECK(picks_pages8(128, 32, 32) == two_per_sm);  // MHA, 4096 CTAs
    CHECK(picks_pages8(64, 8, 4) == two_per_sm);     // h8kv4-B64: 256 CTAs
    CHECK(picks_pages8(16, 64, 8) == "grouped_mma_ws");  // 128 CTAs: one per SM
    // fewer than 4 grouped CTAs: per_head, TGS 4
    CHECK(picks(1, 32, 1, info) == "per_head_tgs4");
    CHECK(picks(3, 32, 1, info) == "per_head_tgs4");
    CHECK(picks(1, 2, 2, info) == "per_head_tgs4");  // MHA with 2 heads: 2 CTAs either way
    // a group above 32 has no grouped kernel
    CHECK(picks(64, 64, 1, info) == "per_head_tgs4");
    // a GPU that gives a CTA 99 KiB (sm_86, sm_89): step 10's ring does not fit, step 9's does
    pa::DeviceInfo small = info;
    small.smem_per_block_optin = 99 * 1024;
    CHECK(picks(16, 64, 8, small) == "grouped_mma");
}
