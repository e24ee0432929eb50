// Lesson 03 (split-k: the partition kernel with its sentinel, the reduce, the fused merge)
// on the GPU, against the double-precision reference. Every test here is labelled `gpu`.
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <utility>
#include <vector>

#include "cuda_check.cuh"
#include "gpu_cases.h"
#include "split_k.h"

namespace {

constexpr uint64_t kSeed = 20250303;  // printed in the test names: rerun a failure with it

lesson03::SplitPlan fixed(int size, bool fused = false, bool head_rows = false) {
    lesson03::SplitPlan p;
    p.partition_size = size;
    p.fused = fused;
    p.head_rows = head_rows;
    return p;
}

lesson03::SplitPlan even(int splits, bool head_rows = false) {
    lesson03::SplitPlan p;
    p.partition_size = 0;
    p.splits = splits;
    p.head_rows = head_rows;
    return p;
}

// Step 1 (fused: step 2): the thread-group partitions, at any partition size.
lesson03::SplitPlan step(int size, bool fused = false) {
    lesson03::SplitPlan p;
    p.tgs = lesson03::kStepTgs;
    p.partition_size = size;
    p.fused = fused;
    return p;
}

lesson03::SplitPlan units(lesson03::SplitPlan p) {
    p.units = true;
    return p;
}

// Unit copies run on sm_90 in a build with sm_90 code; elsewhere they are refused, by name.
bool units_run_here(const pa::DeviceInfo& info) {
    const std::string why = lesson03::why_not(units(fixed(256)), pa::make_shape("probe", 8, 1, {1000}), info);
    if (!why.empty()) {
        INFO(why);
        CHECK(why.find("sm_90") != std::string::npos);
    }
    return why.empty();
}

// The unit copies' documented refusals: off sm_90, and pages smaller than a 16-token unit
// (D 64 and 128; a unit is 8 tokens at D 256).
bool units_may_refuse(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return !units_run_here(info) || (s.D != 256 && s.block_size < 16);
}

void check_plan_on(const lesson03::SplitPlan& plan, const pa::DecodeShape& s, uint64_t seed, int launches = 1) {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeVariant v = lesson03::variant(plan);
    INFO(v.name << " on " << s.name << " (max ctx " << s.max_ctx() << ", " << pa::dtype_name(s.dtype) << ")");
    REQUIRE(v.why_not(s, info).empty());
    const pa::DecodeProblem p = pa::make_decode_problem(s, seed);
    const std::vector<double> ref = pa::reference::softmax_decode(p);
    pa::DeviceDecodeProblem dev(p);
    for (int i = 0; i < launches; ++i) {  // a fused launch must leave its counters ready for the next
        const pa::CheckResult r = pa::check_once(v, dev, p, ref);
        INFO("launch " << i << ": " << r.message);
        CHECK(r.pass);
    }
}

}  // namespace

TEST_CASE("lesson03 split-k at partitions 32..512, fused and not, unit copies, matches the reference on 40 random cases (seed 20250303)",
          "[gpu][lesson03]") {
    std::vector<pa::DecodeVariant> variants;
    for (int size : {32, 64, 256, 512}) variants.push_back(lesson03::variant(fixed(size)));
    for (int size : {32, 128}) variants.push_back(lesson03::variant(fixed(size, true)));
    variants.push_back(lesson03::variant(even(8)));
    for (int size : {32, 128, 512}) variants.push_back(lesson03::variant(units(fixed(size))));
    variants.push_back(lesson03::variant(units(fixed(128, true))));
    variants.push_back(lesson03::auto_variant());
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    pa::testing::RandomCheckOptions o;
    o.may_refuse = [&](const pa::DecodeVariant& v, const pa::DecodeShape& s) {
        return s.group() > 32 || (v.name.find("units") != std::string::npos && units_may_refuse(s, info));
    };
    const auto r = pa::testing::check_variants_on_random_cases(variants, kSeed, 40, {}, o);
    CHECK(r.checked >= 40 * 8);
    CHECK(r.passed == r.checked);
}

TEST_CASE("lesson03 every segment count 1..64, 256 and 1024 (partition 32, rows and units), and ctx 513 (17 segments)",
          "[gpu][lesson03]") {
    std::vector<int> counts;
    for (int n = 1; n <= 64; ++n) counts.push_back(n);
    counts.push_back(256);
    counts.push_back(1024);
    for (int n : counts) {
        // one sequence ending inside its last segment, one a segment shorter (a sentinel at the end)
        const int ctx = n * 32 - (n % 7);
        std::vector<int> lens = {ctx};
        if (n > 1) lens.push_back((n - 1) * 32);
        const pa::DecodeShape s = pa::make_shape("segments-" + std::to_string(n), 8, 1, lens, 128, 16,
                                                 n % 2 ? pa::DType::bf16 : pa::DType::fp16);
        check_plan_on(fixed(32), s, kSeed + n);
        if (n % 8 == 1) check_plan_on(fixed(32, true), s, kSeed + n, 2);
        if (units_run_here(pa::testing::gpu_for_test())) {  // two units a partition; the last one partly past the end
            check_plan_on(units(fixed(32)), s, kSeed + n);
            if (n % 8 == 3) check_plan_on(units(fixed(32, true)), s, kSeed + n, 2);
        }
    }
    check_plan_on(fixed(32), pa::make_shape("ctx513", 8, 2, {513}, 128, 16, pa::DType::bf16), kSeed);
}

TEST_CASE("lesson03 mixed lengths: short sequences leave sentinel partitions; every page size and D", "[gpu][lesson03]") {
    std::vector<int> mixed;
    for (int i = 0; i < 12; ++i) mixed.push_back(1 + (i * 1999) % 6000);  // 1 .. 5999 tokens
    for (int bs : {8, 16, 32})
        for (int D : {64, 128, 256})
            for (pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
                const pa::DecodeShape s = pa::make_shape("mixed-bs" + std::to_string(bs) + "-D" + std::to_string(D), 16, 4,
                                                         mixed, D, bs, t);
                check_plan_on(fixed(256), s, kSeed + bs + D);
                check_plan_on(fixed(64, true), s, kSeed + bs + D, 2);
                check_plan_on(even(8), s, kSeed + bs + D);
                if (!units_may_refuse(s, pa::testing::gpu_for_test())) {
                    check_plan_on(units(fixed(256)), s, kSeed + bs + D);
                    check_plan_on(units(fixed(128, true)), s, kSeed + bs + D, 2);
                    check_plan_on(units(even(8)), s, kSeed + bs + D);
                }
            }
}

TEST_CASE("lesson03 contexts up to 131072 tokens, groups 1, 8 and 32", "[gpu][lesson03]") {
    check_plan_on(fixed(512), pa::make_shape("ctx128k-g8", 8, 1, {131072}, 128, 16, pa::DType::bf16), kSeed);
    check_plan_on(fixed(512, true) , pa::make_shape("ctx100k-g32", 32, 1, {100003, 7}, 128, 16, pa::DType::fp16), kSeed, 2);
    check_plan_on(fixed(128), pa::make_shape("ctx65k-g1", 4, 4, {65537}, 128, 32, pa::DType::fp16), kSeed);
    if (units_run_here(pa::testing::gpu_for_test())) {
        check_plan_on(units(fixed(8192)), pa::make_shape("ctx128k-g8", 8, 1, {131072, 8191}, 128, 16, pa::DType::fp16), kSeed);
        check_plan_on(units(fixed(512, true)), pa::make_shape("ctx65k-g1", 4, 4, {65537}, 128, 32, pa::DType::bf16), kSeed, 2);
    }
}

TEST_CASE("lesson03 head rows and the flat merge: groups 12, 16, 20 and 32, partitions 32..512, fused and even splits, unit "
          "copies, every page size",
          "[gpu][lesson03]") {
    auto flat = [](lesson03::SplitPlan p) {  // step 7: the same plan, its slices merged flat
        p.flat_merge = true;
        return p;
    };
    // lengths with sentinel partitions (1, 129 tokens), slices with no token in the last
    // tile (33), partitions ending mid-tile (1000, 4097)
    const std::vector<int> lens = {1, 33, 129, 1000, 4097};
    struct Group { int H, Hkv; };
    for (const Group gr : {Group{24, 2}, Group{16, 1}, Group{40, 2}, Group{32, 1}, Group{64, 2}})
        for (int bs : {8, 16, 32})
            for (int D : {64, 128}) {
                const pa::DType t = (gr.H + bs + D) % 2 ? pa::DType::bf16 : pa::DType::fp16;
                const pa::DecodeShape s = pa::make_shape(
                    pa::strf("rows-g%d-bs%d-D%d", gr.H / gr.Hkv, bs, D), gr.H, gr.Hkv, lens, D, bs, t);
                const uint64_t seed = kSeed + gr.H + bs + D;
                for (int size : {32, 64, 128, 256, 512}) check_plan_on(fixed(size, false, true), s, seed);
                check_plan_on(fixed(64, true, true), s, seed, 2);
                check_plan_on(even(8, true), s, seed);
                for (int size : {32, 512}) check_plan_on(flat(fixed(size, false, true)), s, seed);
                check_plan_on(flat(fixed(64, true, true)), s, seed, 2);
                check_plan_on(flat(even(8, true)), s, seed);
                if (!units_may_refuse(s, pa::testing::gpu_for_test())) {  // slices of slots, not of tokens
                    for (int size : {32, 128, 512}) check_plan_on(units(fixed(size, false, true)), s, seed);
                    check_plan_on(units(fixed(64, true, true)), s, seed, 2);
                    check_plan_on(units(even(8, true)), s, seed);
                    for (int size : {128, 512}) check_plan_on(flat(units(fixed(size, false, true))), s, seed);
                    check_plan_on(flat(units(fixed(64, true, true))), s, seed, 2);
                }
            }
    check_plan_on(fixed(512, true, true), pa::make_shape("rows-ctx100k-g32", 32, 1, {100003, 7}, 128, 16, pa::DType::bf16),
                  kSeed, 2);
    check_plan_on(flat(fixed(512, true, true)),
                  pa::make_shape("flat-ctx100k-g32", 32, 1, {100003, 7}, 128, 16, pa::DType::fp16), kSeed, 2);
    CHECK(lesson03::why_not(flat(fixed(256)), pa::make_shape("flat-g32", 32, 1, {100}, 128, 16, pa::DType::fp16),
                            pa::testing::gpu_for_test())
              .find("head-row kernel") != std::string::npos);
    if (units_run_here(pa::testing::gpu_for_test()))
        check_plan_on(units(fixed(1024, false, true)),
                      pa::make_shape("rows-units-ctx128k-g32", 32, 1, {131072, 1000}, 128, 16, pa::DType::fp16), kSeed);
}

// Unit copies at the unit and tile boundaries of a partition (a unit is 16 tokens at D 128, 8
// at D 256): contexts ending on either side of them, the partition, head-row and flat-merge
// kernels, fused and not. Small enough to run alone under compute-sanitizer (test_gpu_lesson03
// "lesson03 unit copies*").
TEST_CASE("lesson03 unit copies at unit and tile boundaries, partition and head-row kernels", "[gpu][lesson03]") {
    if (!units_run_here(pa::testing::gpu_for_test())) return;
    const std::vector<int> lens = {1, 15, 16, 17, 127, 128, 129, 255, 1000};
    check_plan_on(units(fixed(128)), pa::make_shape("units-g8", 8, 1, lens, 128, 16, pa::DType::fp16), kSeed);
    check_plan_on(units(fixed(32, true)), pa::make_shape("units-g2", 8, 4, lens, 128, 32, pa::DType::bf16), kSeed, 2);
    check_plan_on(units(fixed(64)), pa::make_shape("units-g8-D256", 8, 1, lens, 256, 8, pa::DType::bf16), kSeed);
    check_plan_on(units(fixed(128, false, true)), pa::make_shape("rows-units-g32", 32, 1, lens, 128, 16, pa::DType::fp16), kSeed);
    check_plan_on(units(fixed(32, true, true)), pa::make_shape("rows-units-g12-D64", 24, 2, lens, 64, 32, pa::DType::bf16),
                  kSeed, 2);
    lesson03::SplitPlan flat = units(fixed(128, false, true)), flat_fused = units(fixed(32, true, true));  // step 7
    flat.flat_merge = flat_fused.flat_merge = true;
    check_plan_on(flat, pa::make_shape("flat-units-g32", 32, 1, lens, 128, 16, pa::DType::bf16), kSeed);
    check_plan_on(flat_fused, pa::make_shape("flat-units-g12-D64", 24, 2, lens, 64, 32, pa::DType::fp16), kSeed, 2);
}

// Step 8: the partitions of each (sequence, KV head) one cluster, merged in it. Lengths that
// leave partitions past a sequence's end (they return at once and the others must not read
// them) and slices with no token, 2 to 4 partitions, fixed and even, with and without unit
// copies, groups 12 to 32, D 64 and 128, every page size; launched twice. Small enough to run
// alone under compute-sanitizer (test_gpu_lesson03 "lesson03 cluster merge*").
TEST_CASE("lesson03 cluster merge: 2 to 4 partitions, sentinel partitions, groups 12 to 32, matches the reference",
          "[gpu][lesson03]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    auto cluster = [](lesson03::SplitPlan p) {  // step 8: the flat head-row kernel in clusters
        p.head_rows = p.flat_merge = p.cluster = true;
        return p;
    };
    const pa::DecodeShape probe = pa::make_shape("probe-g32", 32, 1, {1000});
    if (!units_run_here(info)) {  // no sm_90 code or no sm_90 GPU: refused by name
        const std::string why = lesson03::why_not(cluster(fixed(512)), probe, info);
        INFO(why);
        CHECK(why.find("cluster") != std::string::npos);
        return;
    }
    const std::vector<int> lens = {1, 33, 129, 1000, 2049, 4097};  // 4097 at 2048: 3 partitions; 1 token: 2 sentinels
    struct Group { int H, Hkv; };
    for (const Group gr : {Group{24, 2}, Group{32, 1}, Group{40, 2}})
        for (int bs : {8, 16, 32})
            for (int D : {64, 128}) {
                const pa::DType t = (gr.H + bs + D) % 2 ? pa::DType::bf16 : pa::DType::fp16;
                const pa::DecodeShape s = pa::make_shape(
                    pa::strf("cluster-g%d-bs%d-D%d", gr.H / gr.Hkv, bs, D), gr.H, gr.Hkv, lens, D, bs, t);
                const uint64_t seed = kSeed + 3 * gr.H + bs + D;
                for (int size : {1056, 2048, 4096}) check_plan_on(cluster(fixed(size)), s, seed, 2);  // 4, 2 and 2 partitions, 3 and 1 used
                check_plan_on(cluster(even(4)), s, seed, 2);
                if (!units_may_refuse(s, info)) {
                    for (int size : {1056, 2048}) check_plan_on(cluster(units(fixed(size))), s, seed, 2);
                    check_plan_on(cluster(units(even(2))), s, seed, 2);
                }
            }
    // more partitions than a cluster merges, a longest-first order, a fused merge: refused by name
    const pa::DecodeShape s = pa::make_shape("cluster-g32", 32, 1, {4097}, 128, 16, pa::DType::fp16);
    CHECK(lesson03::why_not(cluster(fixed(512)), s, info).find("at most 4") != std::string::npos);
    lesson03::SplitPlan lpt = cluster(fixed(2048));
    lpt.longest_first = true;
    CHECK(lesson03::why_not(lpt, s, info).find("grid's order") != std::string::npos);
    CHECK(lesson03::why_not(cluster(fixed(2048, true)), s, info).find("no fused") != std::string::npos);
    lesson03::SplitPlan no_flat = cluster(fixed(2048));
    no_flat.flat_merge = false;
    CHECK(lesson03::why_not(no_flat, s, info).find("flat head-row kernel") != std::string::npos);
}

TEST_CASE("lesson03 refuses what it cannot run, by name", "[gpu][lesson03]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeShape g64 = pa::make_decode_shape("g64", 2, 64, 1, 100, pa::DType::fp16);
    CHECK(lesson03::why_not(fixed(256), g64, info).find("group 64") != std::string::npos);
    const pa::DecodeShape ok = pa::make_decode_shape("ok", 2, 8, 1, 100, pa::DType::fp16);
    CHECK(lesson03::why_not(fixed(48), ok, info).find("multiple of 32") != std::string::npos);
    CHECK(lesson03::why_not(fixed(96), ok, info).empty());
    CHECK(lesson03::why_not(fixed(256, false, true), ok, info).find("groups of 9 to 32") != std::string::npos);
    const pa::DecodeShape g32_d256 = pa::make_shape("g32-D256", 32, 1, {100}, 256, 16, pa::DType::fp16);
    CHECK(lesson03::why_not(fixed(256, false, true), g32_d256, info).find("head-row") != std::string::npos);
    // auto then takes the partition kernel there (where this GPU runs it), not the single pass
    const pa::DecodeShape g32_d256_long = pa::make_shape("g32-D256-long", 32, 1, {8192}, 256, 16, pa::DType::fp16);
    const lesson03::Choice c = lesson03::auto_choice(g32_d256_long, info);
    CHECK_FALSE(c.plan.head_rows);
    CHECK(c.split);  // where the partition kernel does not fit this GPU, the steps
    CHECK(c.plan.tgs == (lesson03::why_not(fixed(128), g32_d256_long, info).empty() ? 0 : lesson03::kStepTgs));
    // unit copies: pages of 8 are smaller than a unit at D 128 (auto copies rows there)
    const pa::DecodeShape pages8 = pa::make_shape("pages8", 8, 1, {4096}, 128, 8, pa::DType::fp16);
    if (units_run_here(info)) {
        CHECK(lesson03::why_not(units(fixed(256)), pages8, info).find("16-token unit") != std::string::npos);
        CHECK(lesson03::why_not(units(fixed(256)), pa::make_shape("D256-pages8", 8, 1, {4096}, 256, 8, pa::DType::fp16), info)
                  .empty());
        CHECK(lesson03::auto_choice(pa::make_shape("pages16", 8, 1, {4096}, 128, 16, pa::DType::fp16), info).plan.units);
    }
    {  // launched anyway (the variant's why_not skipped): a clear error, not a trapped kernel
        const pa::DecodeProblem p = pa::make_decode_problem(pages8, kSeed);
        pa::DeviceDecodeProblem dev(p);
        CHECK_THROWS_AS(lesson03::variant(units(fixed(256))).launch(dev.args(), nullptr), pa::CudaError);
        CHECK_THROWS_AS(lesson03::variant(units(fixed(256, false, true)))
                            .launch(dev.args(), nullptr), pa::CudaError);  // group 8: no head rows either
    }
    const lesson03::Choice c8 = lesson03::auto_choice(pages8, info);
    CHECK(c8.split);
    CHECK_FALSE(c8.plan.units);
    // one partition on a grid of two grouped CTAs: the partition kernel with unit copies where
    // they run, else the single pass (a one-partition split without units does not pay)
    const pa::DecodeShape tiny = pa::make_shape("g6-B1-ctx128", 12, 2, {128}, 128, 16, pa::DType::fp16);
    const lesson03::Choice t = lesson03::auto_choice(tiny, info);
    CHECK(t.split == units_run_here(info));
    if (t.split) {
        CHECK(t.plan.units);
        CHECK(lesson03::grid_partitions(t.plan, 128) == 1);
    }
    CHECK_FALSE(lesson03::auto_choice(pa::make_shape("g6-B1-ctx128-pages8", 12, 2, {128}, 128, 8, pa::DType::fp16), info).split);
    for (const pa::DecodeShape& s : {tiny, pa::make_shape("g6-B1-ctx100", 12, 2, {100}, 64, 16, pa::DType::bf16)}) {
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        pa::DeviceDecodeProblem dev(p);
        const pa::CheckResult r = pa::check_once(lesson03::auto_variant(), dev, p, pa::reference::softmax_decode(p));
        INFO(s.name << ": " << r.message);
        CHECK(r.pass);
    }
}

TEST_CASE("lesson03 longest first: the same bits as the grid's order, partition and head-row kernels, fused and not",
          "[gpu][lesson03]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    std::vector<int> mixed;
    for (int i = 0; i < 13; ++i) mixed.push_back(1 + (i * 2711) % 9000);  // 1 .. 8999 tokens: full, partial and empty cells
    auto lpt = [](lesson03::SplitPlan p) {
        p.longest_first = true;
        return p;
    };
    std::vector<std::pair<lesson03::SplitPlan, pa::DecodeShape>> cases = {
        {fixed(512), pa::make_shape("lpt-g8", 16, 2, mixed, 128, 16, pa::DType::fp16)},
        {fixed(256, true), pa::make_shape("lpt-g2", 8, 4, mixed, 128, 16, pa::DType::bf16)},
        {even(6), pa::make_shape("lpt-even-g4", 8, 2, mixed, 64, 8, pa::DType::fp16)},
        {fixed(1024, false, true), pa::make_shape("lpt-rows-g16", 16, 1, mixed, 128, 16, pa::DType::bf16)},
    };
    if (units_run_here(info)) {
        cases.push_back({units(fixed(2048)), pa::make_shape("lpt-units-g8", 16, 2, mixed, 128, 16, pa::DType::fp16)});
        cases.push_back({units(fixed(128, true, true)), pa::make_shape("lpt-rows-units-g32", 32, 1, mixed, 128, 32, pa::DType::bf16)});
    }
    for (const auto& [plan, s] : cases) {
        const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
        const std::vector<double> ref = pa::reference::softmax_decode(p);
        pa::DeviceDecodeProblem dev(p);
        const pa::DecodeVariant grid_order = lesson03::variant(plan), longest = lesson03::variant(lpt(plan));
        INFO(longest.name << " on " << s.name);
        REQUIRE(longest.why_not(s, info).empty());
        CHECK(pa::check_once(grid_order, dev, p, ref).pass);
        const std::vector<uint16_t> expected = dev.download_output();
        for (int i = 0; i < 2; ++i) {  // the second launch reuses the uploaded table (and a fused plan's counters)
            CHECK(pa::check_once(longest, dev, p, ref).pass);
            CHECK(dev.download_output() == expected);  // each cell writes its own partial: order changes no bit
        }
        pa::PagedDecodeArgs no_host = dev.args();  // no host lengths: the grid's own order, still right
        no_host.context_lens_host = nullptr;
        dev.poison_output();
        longest.launch(no_host, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        CHECK(dev.download_output() == expected);
        // host lengths a token longer than the GPU's, as a decode step later (re-planned; the
        // table is uploaded only where the order moved), then the true ones again: still right
        std::vector<int> grown = s.ctx;
        for (int& c : grown) ++c;
        for (const std::vector<int>* lens : std::vector<const std::vector<int>*>{&grown, &s.ctx}) {
            pa::PagedDecodeArgs moved = dev.args();
            moved.context_lens_host = lens->data();
            dev.poison_output();
            longest.launch(moved, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            CHECK(dev.download_output() == expected);
        }
    }
}

TEST_CASE("lesson03 two streams at once: scratch, merge counters and order tables are the stream's own", "[gpu][lesson03]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    // two batches of the same size (so that even scratch sized per launch would be shared), other
    // lengths; small enough that both streams' CTAs are resident together
    const pa::DecodeShape a = pa::make_shape("streams-a", 8, 2, {3000, 700, 5000, 1}, 128, 16, pa::DType::bf16);
    const pa::DecodeShape b = pa::make_shape("streams-b", 8, 2, {4100, 5000, 90, 2600}, 128, 16, pa::DType::bf16);
    lesson03::SplitPlan lpt = fixed(256);
    lpt.longest_first = true;
    lesson03::SplitPlan lpt_fused = fixed(512, true);
    lpt_fused.longest_first = true;
    for (const lesson03::SplitPlan& plan : {fixed(256), fixed(512, true), lpt, lpt_fused}) {
        const pa::DecodeVariant v = lesson03::variant(plan);
        REQUIRE(v.why_not(a, info).empty());
        REQUIRE(v.why_not(b, info).empty());
        pa::testing::check_two_streams(v, a, b, kSeed + 11);
    }
    pa::testing::check_two_streams(lesson03::auto_variant(), a, b, kSeed + 12);
    for (bool fused : {false, true})  // the steps: their scratch and per-head counters are the stream's too
        pa::testing::check_two_streams(lesson03::variant(step(256, fused)), a, b, kSeed + 13);
}

// The ladder's first steps (step1_partitions.cuh, step2_fused_merge.cuh): lesson 02's step 2
// with a partition axis, every sm_80+ GPU.
TEST_CASE("lesson03 steps 1 and 2 (thread-group partitions, reduce or fused merge) match the reference on 40 random cases",
          "[gpu][lesson03]") {
    std::vector<pa::DecodeVariant> variants;
    for (int size : {32, 100, 256}) variants.push_back(lesson03::variant(step(size)));
    for (int size : {64, 512}) variants.push_back(lesson03::variant(step(size, true)));
    const auto r = pa::testing::check_variants_on_random_cases(variants, kSeed + 31, 40);
    CHECK(r.checked == 40 * 5);  // the steps take every group, head size and page size
    CHECK(r.passed == r.checked);
}

TEST_CASE("lesson03 steps 1 and 2: sentinel partitions of mixed lengths, ctx 1, ctx 513 at partition 32, every page size and D",
          "[gpu][lesson03]") {
    std::vector<int> mixed;
    for (int i = 0; i < 12; ++i) mixed.push_back(1 + (i * 1999) % 6000);  // 1 .. 5999 tokens: most partitions of the short ones are sentinels
    for (int bs : {8, 16, 32})
        for (int D : {64, 128, 256}) {
            const pa::DType t = (bs + D) % 3 ? pa::DType::bf16 : pa::DType::fp16;
            const pa::DecodeShape s = pa::make_shape(pa::strf("steps-mixed-bs%d-D%d", bs, D), 16, 4, mixed, D, bs, t);
            const uint64_t seed = kSeed + 100 + bs + D;
            for (int size : {32, 96, 256, 1000}) check_plan_on(step(size), s, seed);  // 96, 1000: not a power of two
            for (int size : {32, 256}) check_plan_on(step(size, true), s, seed, 2);   // the counters are left at 0
        }
    for (bool fused : {false, true}) {
        check_plan_on(step(32, fused), pa::make_shape("steps-ctx513", 8, 2, {513}, 128, 16, pa::DType::bf16), kSeed, 2);
        check_plan_on(step(256, fused), pa::make_shape("steps-ctx1", 8, 8, {1, 1, 1}, 128, 16, pa::DType::fp16), kSeed, 2);
        // a partition of one token, and contexts that end inside a thread-group step (16 tokens)
        check_plan_on(step(1, fused), pa::make_shape("steps-p1", 4, 2, {1, 7, 40}, 64, 8, pa::DType::fp16), kSeed, 2);
        check_plan_on(step(17, fused), pa::make_shape("steps-p17", 4, 1, {16, 17, 18, 33, 1000}, 256, 32, pa::DType::bf16),
                      kSeed, 2);
    }
}

TEST_CASE("lesson03 steps 1 and 2: contexts up to 131072 tokens, groups 1, 8, 32 and 64 (past the mma kernels)",
          "[gpu][lesson03]") {
    check_plan_on(step(512), pa::make_shape("steps-ctx128k-g8", 8, 1, {131072, 3}, 128, 16, pa::DType::bf16), kSeed);
    check_plan_on(step(4096, true), pa::make_shape("steps-ctx128k-g8", 8, 1, {131072, 3}, 128, 16, pa::DType::fp16), kSeed, 2);
    check_plan_on(step(256, true), pa::make_shape("steps-ctx100k-g32", 32, 1, {100003, 7}, 128, 16, pa::DType::fp16), kSeed, 2);
    check_plan_on(step(128), pa::make_shape("steps-ctx65k-g1", 4, 4, {65537}, 128, 32, pa::DType::fp16), kSeed);
    const pa::DecodeShape g64 = pa::make_shape("steps-g64", 64, 1, {5000, 3, 700}, 128, 16, pa::DType::bf16);
    check_plan_on(step(256), g64, kSeed);
    check_plan_on(step(256, true), g64, kSeed, 2);
    // auto runs a group the mma partition kernel refuses (the steps or the single pass)
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    CHECK_FALSE(lesson03::why_not(fixed(256), g64, info).empty());
    CHECK(lesson03::auto_variant().why_not(g64, info).empty());
    const pa::DecodeProblem p = pa::make_decode_problem(g64, kSeed);
    pa::DeviceDecodeProblem dev(p);
    const pa::CheckResult r = pa::check_once(lesson03::auto_variant(), dev, p, pa::reference::softmax_decode(p));
    INFO(r.message);
    CHECK(r.pass);
}

TEST_CASE("lesson03 steps: refusals by name, and step 1's scratch is the mma kernel's (the same reduce reads both)",
          "[gpu][lesson03]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const pa::DecodeShape s = pa::make_shape("steps-refuse", 8, 2, {3000, 10}, 128, 16, pa::DType::fp16);
    CHECK(lesson03::why_not(step(0), s, info).find("not positive") != std::string::npos);
    CHECK(lesson03::why_not(step(1 << 20), s, info).find("shared memory") != std::string::npos);  // 4 MiB of logits
    lesson03::SplitPlan tgs4 = step(256);
    tgs4.tgs = 4;
    CHECK(lesson03::why_not(tgs4, s, info).find("TGS 8") != std::string::npos);
    CHECK(lesson03::why_not(units(step(256)), s, info).find("fixed partitions only") != std::string::npos);
    lesson03::SplitPlan steps_even = even(4);
    steps_even.tgs = lesson03::kStepTgs;
    CHECK(lesson03::why_not(steps_even, s, info).find("fixed partitions only") != std::string::npos);
    CHECK(lesson03::why_not(step(256), s, info).empty());
    // launch_partitions with step 1 and with the mma kernel, one reduce: the same answer
    const pa::DecodeProblem p = pa::make_decode_problem(s, kSeed);
    const std::vector<double> ref = pa::reference::softmax_decode(p);
    pa::DeviceDecodeProblem dev(p);
    const int parts = lesson03::grid_partitions(fixed(256), s.max_ctx()) + 3;  // 3 more than needed: sentinels
    pa::DeviceBuffer<float> m(static_cast<size_t>(s.B) * s.H * parts), l(m.size()), acc(m.size() * s.D);
    lesson03::SplitScratch sc;
    sc.m = m.get();
    sc.l = l.get();
    sc.acc = acc.get();
    sc.max_partitions = parts;
    for (const lesson03::SplitPlan& plan : {step(256), fixed(256)}) {
        if (!lesson03::why_not(plan, s, info).empty()) continue;  // the mma kernel, where this GPU fits it
        INFO(lesson03::plan_name(plan));
        m.fill_bytes(0xff);  // NaN: every entry must be written, sentinels included
        l.fill_bytes(0xff);
        acc.fill_bytes(0xff);
        dev.poison_output();
        const pa::PagedDecodeArgs a = dev.args();
        lesson03::launch_partitions(a, plan, sc, nullptr);
        lesson03::launch_reduce(a, sc, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const pa::CheckResult r = pa::compare_output(dev.download_output(), ref, s.dtype);
        INFO(r.message);
        CHECK(r.pass);
    }
    CHECK_THROWS_AS(lesson03::launch_partitions(dev.args(), step(256, true), sc, nullptr), pa::CudaError);  // fused: no
}
