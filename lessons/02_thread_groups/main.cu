// lesson02_thread_groups: checks every lesson-02 configuration (both mappings, TGS 4/8/16,
// the ablation steps, the tensor-core grouped_mma, the automatic choice) against the CPU
// reference, including contexts
// that catch the group-mask trap, then measures them beside lesson 01.
//
//   lesson02_thread_groups                    check, then Table A, the TGS sweep, the ablation
//   lesson02_thread_groups --check            check only (what the sanitizer tests run)
//   lesson02_thread_groups --bench --shape mqa-B16-ctx4k [--variant grouped_tgs8]
//   lesson02_thread_groups --timeline [--shape llama7b-B8-ctx2k]   where grouped_mma's time goes
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <array>
#include <cstdio>
#include <map>
#include <set>

#include "ceilings.cuh"
#include "decode_driver.cuh"
#include "decode_reference.h"
#include "naive_decode.h"
#include "thread_group_decode.h"
#include "timeline.h"

namespace {

const char* kProgram = "lesson02_thread_groups";

// The H200 post (bf16, H8/Hkv4, gated attention, microseconds): TGS 4 / 8 / 16.
const std::map<std::string, std::array<double, 3>> kPostTgsSweep = {
    {"h8kv4-B1-ctx256", {30.28, 27.32, 31.98}},    {"h8kv4-B32-ctx256", {41.64, 33.07, 33.82}},
    {"h8kv4-B32-ctx512", {79.67, 62.30, 64.60}},   {"h8kv4-B64-ctx128", {34.05, 25.68, 21.48}},
    {"h8kv4-B64-ctx1k", {297.92, 225.29, 210.27}}, {"h8kv4-B128-ctx256", {91.14, 71.29, 71.29}},
    {"h8kv4-B128-ctx512", {176.84, 137.00, 137.00}},
};
// The same post's ablation at TGS 8: baseline / + paired K loads / + q in registers.
const std::map<std::string, std::array<double, 3>> kPostAblation = {
    {"h8kv4-B1-ctx256", {27.32, 25.37, 24.55}},  {"h8kv4-B32-ctx128", {18.32, 15.96, 15.18}},
    {"h8kv4-B32-ctx256", {33.07, 28.43, 26.71}}, {"h8kv4-B32-ctx512", {62.30, 53.71, 49.47}},
    {"h8kv4-B64-ctx128", {25.68, 21.23, 18.19}}, {"h8kv4-B64-ctx256", {47.83, 39.02, 32.00}},
    {"h8kv4-B128-ctx256", {91.14, 74.83, 61.44}},
};

struct RowIndex {
    std::map<std::string, const pa::ResultRow*> by_key;
    explicit RowIndex(const std::vector<pa::ResultRow>& rows) {
        for (const auto& r : rows) by_key[r.shape + "|" + r.variant + "|" + r.l2] = &r;
    }
    const pa::ResultRow* get(const std::string& shape, const std::string& variant, const std::string& l2 = "cold") const {
        auto it = by_key.find(shape + "|" + variant + "|" + l2);
        return it == by_key.end() ? nullptr : it->second;
    }
    std::string us(const std::string& shape, const std::string& variant, const std::string& l2 = "cold") const {
        const pa::ResultRow* r = get(shape, variant, l2);
        return r ? pa::strf("%.2f", r->us_median) : "-";
    }
};

const std::vector<std::string> kLesson02Names = {"per_head_tgs4", "per_head_tgs8", "per_head_tgs16", "grouped_tgs4",
                                                 "grouped_tgs8",  "grouped_tgs16", "grouped_mma"};

// The fastest of the seven main configurations (L2-cold median) on a shape.
std::pair<std::string, double> best_of(const RowIndex& idx, const std::string& shape,
                                       const std::vector<std::string>& names = kLesson02Names) {
    std::pair<std::string, double> best{"-", 1e30};
    for (const auto& n : names)
        if (const pa::ResultRow* r = idx.get(shape, n))
            if (r->us_median < best.second) best = {n, r->us_median};
    return best;
}

void print_table_a(const RowIndex& idx) {
    std::printf("\nTable A: lesson 02 against lesson 01 (fp16, block 16, L2-cold medians, us)\n");
    pa::TextTable t({"shape", "K/V MiB", "lesson01", "best lesson02", "us", "speedup", "% read BW", "auto pick", "auto us",
                     "grouped CTAs"});
    for (const auto& s : pa::table_a()) {
        const pa::ResultRow* naive = idx.get(s.name, "naive");
        const auto best = best_of(idx, s.name);
        const pa::ResultRow* best_row = idx.get(s.name, best.first);
        const pa::ResultRow* au = idx.get(s.name, "auto");
        if (!naive || !best_row) continue;
        t.add_row({s.name, pa::strf("%.0f", s.kv_bytes() / 1048576.0), pa::strf("%.2f", naive->us_median), best.first,
                   pa::strf("%.2f", best.second), pa::strf("%.2fx", naive->us_median / best.second),
                   pa::strf("%.1f", *best_row->pct_read_bw), lesson02::config_name(lesson02::auto_config(s)),
                   au ? pa::strf("%.2f", au->us_median) : "-", std::to_string(static_cast<long long>(s.B) * s.Hkv)});
    }
    t.print();
}


void print_tgs_sweep(const RowIndex& idx) {
    std::printf("\nTGS sweep (bf16, H8/Hkv4, L2-cold medians, us) beside the H200 post (gated attention, us)\n");
    pa::TextTable t({"shape", "ph tgs4", "ph tgs8", "ph tgs16", "gr tgs4", "gr tgs8", "gr tgs16", "best", "auto pick",
                     "auto us", "post 4", "post 8", "post 16"});
    for (const auto& s : pa::table_c_tgs_sweep()) {
        const auto best = best_of(idx, s.name);
        const auto post = kPostTgsSweep.at(s.name);
        t.add_row({s.name, idx.us(s.name, "per_head_tgs4"), idx.us(s.name, "per_head_tgs8"), idx.us(s.name, "per_head_tgs16"),
                   idx.us(s.name, "grouped_tgs4"), idx.us(s.name, "grouped_tgs8"), idx.us(s.name, "grouped_tgs16"),
                   best.first, lesson02::config_name(lesson02::auto_config(s)), idx.us(s.name, "auto"),
                   pa::strf("%.2f", post[0]), pa::strf("%.2f", post[1]), pa::strf("%.2f", post[2])});
    }
    t.print();
}

void print_ablation(const RowIndex& idx) {
    std::printf("\nAblation, grouped TGS 8 (bf16, H8/Hkv4, L2-cold medians, us) beside the H200 post (us)\n");
    pa::TextTable t({"shape", "baseline", "+ wide K", "+ q in regs", "total", "post base", "post +K pair", "post +q regs",
                     "post total"});
    for (const auto& s : pa::table_c_ablation()) {
        const pa::ResultRow* a = idx.get(s.name, "grouped_tgs8_scalar_k");
        const pa::ResultRow* c = idx.get(s.name, "grouped_tgs8");
        const auto post = kPostAblation.at(s.name);
        t.add_row({s.name, idx.us(s.name, "grouped_tgs8_scalar_k"), idx.us(s.name, "grouped_tgs8_q_smem"),
                   idx.us(s.name, "grouped_tgs8"), a && c ? pa::strf("%.2fx", a->us_median / c->us_median) : "-",
                   pa::strf("%.2f", post[0]), pa::strf("%.2f", post[1]), pa::strf("%.2f", post[2]),
                   pa::strf("%.2fx", post[0] / post[2])});
    }
    t.print();
}

// --timeline: grouped_mma's timeline build (timeline.h) on each shape, checked against the
// reference, then launched L2-cold kTimelineLaunches times; the launch whose last CTA ends
// in the middle is summarised.
constexpr int kTimelineLaunches = 7;

struct TimelineRun {
    lesson02::TimelineSummary sum;
    std::vector<double> spans;  // first CTA start -> last CTA end, every launch
};

TimelineRun run_timeline(const pa::DecodeShape& s, uint64_t seed, const pa::DeviceInfo& info,
                         const pa::DecodeReference& reference) {
    const pa::DecodeProblem p = pa::make_decode_problem(s, seed);
    pa::DeviceDecodeProblem dev(p, pa::l2_cold_copies(p, info));
    const int tile = lesson02::grouped_mma_tile_tokens(s.D);
    const int stride = lesson02::timeline_stride(s.max_ctx(), tile);
    pa::DeviceBuffer<uint64_t> record(static_cast<size_t>(s.B) * s.Hkv * stride);
    pa::DecodeVariant v;
    v.name = "grouped_mma_timeline";
    v.launch = [&](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        lesson02::launch_grouped_mma_timeline(a, record.get(), stride, st);
    };
    const pa::CheckResult check = pa::check_once(v, dev, p, reference(p));
    if (!check.pass) throw std::runtime_error("the timeline build of grouped_mma failed its check on " + s.name + ": " + check.message);

    TimelineRun run;
    std::vector<lesson02::TimelineSummary> sums;
    for (int i = 0; i < 3 + kTimelineLaunches; ++i) {  // three warm-up launches, then the recorded ones
        v.launch(dev.args(i % dev.copies()), nullptr);  // the copy the previous launch did not read: L2-cold
        CUDA_CHECK(cudaDeviceSynchronize());
        if (i < 3) continue;
        sums.push_back(lesson02::summarize_timeline(record.download(), stride, s.Hkv, s.ctx, tile, s.D * 2));
        run.spans.push_back(sums.back().end_last);
    }
    std::sort(sums.begin(), sums.end(), [](const auto& a, const auto& b) { return a.end_last < b.end_last; });
    run.sum = sums[sums.size() / 2];
    return run;
}

// The shapes --timeline runs (default: Table A); exits with 2 and one line on a shape the
// timeline build cannot run.
std::vector<pa::DecodeShape> timeline_shapes_or_exit(const pa::Flags& f) {
    std::vector<pa::DecodeShape> shapes = pa::select_shapes_or_exit(kProgram, f, pa::table_a());
    for (const auto& s : shapes) {
        const std::string why = lesson02::grouped_mma_timeline_why_not(s);
        if (!why.empty()) {
            std::fprintf(stderr, "error: %s: --timeline cannot run %s: %s\n", kProgram, s.name.c_str(), why.c_str());
            std::exit(pa::kExitBadInput);
        }
    }
    return shapes;
}

int timeline_main(const pa::Flags& f, const std::vector<pa::DecodeShape>& shapes, const pa::DeviceInfo& info,
                  const pa::DecodeReference& reference) {
    const double read_bw = pa::measured_read_bandwidth_gbps(info);
    pa::print_run_header("Lesson 02: where grouped_mma's time goes (--timeline)", info, read_bw);
    std::printf("\nEach shape: the timeline build checked against the reference, then %d L2-cold launches; the one whose\n"
                "last CTA ends in the middle is shown. Times in us from the first CTA's start (GPU clock, %%globaltimer).\n"
                "\"landed\" = the consumers saw the tile arrive; rates count K and V bytes of real tokens.\n",
                kTimelineLaunches);
    pa::TextTable t({"shape", "CTAs", "SMs", "CTA/SM", "1st copy", "1st tile", "10% landed", "50%", "90%", "all",
                     "CTA ends first/p50/last", "steady GB/s", "% read BW", "CTA GB/s p10/p50/p90", "at steady",
                     "start-up", "tail"});
    std::vector<pa::ResultRow> rows;
    for (const auto& s : shapes) {
        const TimelineRun run = run_timeline(s, f.seed, info, reference);
        const lesson02::TimelineSummary& m = run.sum;
        const bool steady = m.steady_gbps > 0;  // else the launch was mostly start-up
        const pa::LaunchGeometry g = lesson02::geometry(lesson02::grouped_mma_config(), s, info);
        t.add_row({s.name, std::to_string(m.ctas), std::to_string(m.sms_used), std::to_string(g.ctas_per_sm),
                   pa::strf("%.1f/%.1f", m.first_copy_p50, m.first_copy_max),
                   pa::strf("%.1f/%.1f", m.first_tile_p50, m.first_tile_max), pa::strf("%.1f", m.landed_10),
                   pa::strf("%.1f", m.landed_50), pa::strf("%.1f", m.landed_90), pa::strf("%.1f", m.landed_all),
                   pa::strf("%.1f/%.1f/%.1f", m.end_first, m.end_p50, m.end_last), steady ? pa::strf("%.0f", m.steady_gbps) : "-",
                   steady ? pa::strf("%.1f", 100.0 * m.steady_gbps / read_bw) : "-",
                   pa::strf("%.1f/%.1f/%.1f", m.cta_gbps_p10, m.cta_gbps_p50, m.cta_gbps_p90),
                   steady ? pa::strf("%.1f", m.at_steady_us) : "-", steady ? pa::strf("%.1f", m.head_us) : "-",
                   steady ? pa::strf("%.1f", m.tail_us) : "-"});
        pa::ResultRow r = pa::decode_row(info, "02", "grouped_mma_timeline", s);
        r.l2 = "cold";
        std::vector<double> spans = run.spans;
        std::sort(spans.begin(), spans.end());
        r.us_median = m.end_last;  // first CTA start -> last CTA end of the launch shown
        r.us_min = spans.front();
        r.bytes = m.bytes;
        r.gbps = m.bytes / (m.end_last * 1e-6) / 1e9;
        r.pct_read_bw = 100.0 * *r.gbps / read_bw;
        r.check = "PASS";
        const std::pair<const char*, double> cols[] = {
            {"first_copy_p50_us", m.first_copy_p50}, {"first_copy_max_us", m.first_copy_max},
            {"first_tile_p50_us", m.first_tile_p50}, {"first_tile_max_us", m.first_tile_max},
            {"landed_10_us", m.landed_10},           {"landed_50_us", m.landed_50},
            {"landed_90_us", m.landed_90},           {"landed_all_us", m.landed_all},
            {"end_first_us", m.end_first},           {"end_p50_us", m.end_p50},
            {"steady_gbps", m.steady_gbps},          {"cta_gbps_p10", m.cta_gbps_p10},
            {"cta_gbps_p50", m.cta_gbps_p50},        {"cta_gbps_p90", m.cta_gbps_p90},
            {"at_steady_us", m.at_steady_us},        {"startup_us", m.head_us},
            {"tail_us", m.tail_us}};
        r.set_extra("ctas", std::to_string(m.ctas));
        r.set_extra("ctas_per_sm", std::to_string(g.ctas_per_sm));
        const std::set<std::string> steady_cols = {"steady_gbps", "at_steady_us", "startup_us", "tail_us"};
        for (const auto& [k, x] : cols) r.set_extra(k, steady || !steady_cols.count(k) ? pa::strf("%.2f", x) : "");
        rows.push_back(r);
    }
    std::printf("\n");
    t.print();
    std::printf("(at steady + start-up + tail = the last CTA's end. at steady: all bytes at the steady rate; start-up: what\n"
                "the first 10 %% of the bytes took beyond that; tail: the same for the last 10 %%, to the last CTA's end.\n"
                "\"-\": no steady state, the 10 %%..90 %% window being under half of the run)\n");
    pa::write_csv_or_exit(kProgram, f.csv, rows);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const pa::Flags f = pa::parse_flags_or_exit(
        argc, argv,
        pa::decode_usage(kProgram, "Variants: per_head_tgs{4,8,16}, grouped_tgs{4,8,16}, grouped_tgs8_scalar_k,\n"
                                   "grouped_tgs8_q_smem, grouped_mma (tensor cores), auto; the measurement adds lesson 01\n"
                                   "(naive) for comparison.\n"
                                   "--timeline: where grouped_mma's time goes on each shape (default: Table A), D 128.\n"));
    // Names are checked before looking for a GPU, so a typo is exit code 2 everywhere.
    const std::vector<pa::DecodeVariant> variants = pa::select_variants(kProgram, f.variant, lesson02::all_variants());
    std::vector<pa::DecodeShape> default_checks = pa::decode_check_shapes();
    for (const auto& s : lesson02::uneven_check_shapes()) default_checks.push_back(s);
    std::vector<pa::DecodeShape> default_bench = pa::table_a();
    for (const auto& s : pa::table_c()) default_bench.push_back(s);
    const std::vector<pa::DecodeShape> check_shapes = pa::select_shapes_or_exit(kProgram, f, default_checks);
    const std::vector<pa::DecodeShape> bench_shapes = pa::select_shapes_or_exit(kProgram, f, default_bench);

    const pa::DecodeReference reference = [](const pa::DecodeProblem& p) { return pa::reference::softmax_decode(p); };
    if (f.timeline) {
        const std::vector<pa::DecodeShape> shapes = timeline_shapes_or_exit(f);
        const pa::DeviceInfo info = pa::require_gpu(kProgram);
        pa::refuse_unrunnable_shapes(kProgram, shapes, {lesson02::variant(lesson02::grouped_mma_config())}, info);
        try {
            return timeline_main(f, shapes, info, reference);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
            return 1;
        }
    }
    const pa::DeviceInfo info = pa::require_gpu(kProgram);
    pa::refuse_unrunnable_shapes(kProgram, f.bench_only ? bench_shapes : check_shapes, variants, info);
    try {
        int failures = 0;
        pa::print_run_header("Lesson 02: thread groups, wide loads, q in registers, the GQA-grouped CTA", info, 0);
        if (!f.bench_only) failures += pa::run_decode_checks(check_shapes, variants, reference, f.seed, info);
        if (f.check_only) return failures == 0 ? 0 : 1;

        pa::BenchSetup setup;
        setup.info = info;
        setup.lesson = "02";
        setup.iters = f.iters;
        setup.read_bw_gbps = pa::measured_read_bandwidth_gbps(info);
        std::printf("\nmeasurement (seed %llu, %d timed launches after %d warm-up; L2-cold rotates K/V copies over > 2x L2)\n",
                    static_cast<unsigned long long>(f.seed), setup.iters, setup.warmup);
        std::printf("measured streaming read bandwidth: %.0f GB/s\n", setup.read_bw_gbps);
        std::vector<pa::DecodeVariant> measured = variants;
        if (f.variant.empty()) measured.insert(measured.begin(), lesson01::variant());  // the previous lesson, for Table A
        std::vector<pa::ResultRow> rows;
        for (const auto& s : bench_shapes) {
            const pa::DecodeProblem p = pa::make_decode_problem(s, f.seed);
            const std::vector<double> ref = reference(p);
            auto r = pa::bench_decode_shape(setup, p, ref, measured);
            for (auto& row : r) {
                if (row.variant == "naive") row.lesson = "01";
                if (row.variant == "auto") row.set_extra("auto_pick", lesson02::config_name(lesson02::auto_config(s)));
                failures += row.check == "FAIL" && row.l2 == "cold";
            }
            rows.insert(rows.end(), r.begin(), r.end());
        }
        pa::print_decode_rows(rows, info, setup.read_bw_gbps);
        const RowIndex idx(rows);
        std::set<std::string> measured_shapes;
        for (const auto& s : bench_shapes) measured_shapes.insert(s.name);
        auto has_all = [&](const std::vector<pa::DecodeShape>& list) {
            return f.variant.empty() && std::all_of(list.begin(), list.end(), [&](const pa::DecodeShape& s) { return measured_shapes.count(s.name) > 0; });
        };
        if (has_all(pa::table_a())) print_table_a(idx);
        if (has_all(pa::table_c_tgs_sweep())) print_tgs_sweep(idx);
        if (has_all(pa::table_c_ablation())) print_ablation(idx);
        std::printf("\nauto rule: grouped_mma, except per_head_tgs4 for B * Hkv < %d and for groups above 32\n",
                    lesson02::kMinGroupedCtas);
        pa::write_csv_or_exit(kProgram, f.csv, rows);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
        return 1;
    }
}
