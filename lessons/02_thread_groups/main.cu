// lesson02_thread_groups: checks every step of lesson 02's ladder (thread groups, wide
// loads, the grouped CTA: its logits, the online softmax, the cp.async ring, V owners; tensor
// cores, copy warps, bulk rows, unit copies; TGS 4/8/16 where
// it applies; the automatic choice) against the CPU reference, including contexts that
// catch the group-mask trap, then measures them beside lesson 01.
//
//   lesson02_thread_groups                    check, then Table A, the ladder, the TGS sweep
//   lesson02_thread_groups --check            check only (what the sanitizer tests run)
//   lesson02_thread_groups --bench --shape mqa-B16-ctx4k [--variant grouped_tgs8]
//   lesson02_thread_groups --timeline [--shape llama7b-B8-ctx2k]   where step 10's time goes
//   lesson02_thread_groups --copy-rate        what one CTA's copies read, by kind of copy and layout
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>

#include "ceilings.cuh"
#include "copy_rate.h"
#include "cuda_check.cuh"
#include "decode_driver.cuh"
#include "decode_reference.h"
#include "device_buffer.cuh"
#include "lesson02.h"
#include "naive_decode.h"
#include "shapes.h"
#include "timeline.h"

namespace {

const char* kProgram = "lesson02_thread_groups";

std::vector<std::string> names_of(const std::string& prefix) {
    return {prefix + "_tgs4", prefix + "_tgs8", prefix + "_tgs16"};
}

// Every lesson-02 variant but auto.
std::vector<std::string> step_names() {
    std::vector<std::string> out;
    for (const char* p : {"thread_groups", "wide_loads", "per_head", "grouped"})
        for (const auto& n : names_of(p)) out.push_back(n);
    for (const char* n : {"grouped_logits_tgs8", "online_softmax_tgs8", "cp_async_ring_tgs8"}) out.push_back(n);
    out.push_back("grouped_mma");
    out.push_back("grouped_mma_ws");
    out.push_back("grouped_mma_bulk");
    out.push_back("grouped_mma_units");
    out.push_back("grouped_mma_aligned");
    out.push_back("grouped_mma_two_streams");
    return out;
}

std::string auto_pick(const pa::DecodeShape& s) {
    return lesson02::config_name(lesson02::auto_config(s, pa::current_device_info()));
}

void print_table_a(const pa::RowIndex& idx) {
    std::printf("\nTable A: lesson 02 against lesson 01 (fp16, block 16, L2-cold medians, us)\n");
    pa::TextTable t({"shape", "K/V MiB", "lesson01", "best lesson02", "us", "speedup", "% read BW", "auto pick", "auto us",
                     "grouped CTAs"});
    for (const auto& s : pa::table_a()) {
        const pa::ResultRow* naive = idx.get(s.name, "naive");
        const auto best = idx.best_of(s.name, step_names());
        const pa::ResultRow* best_row = idx.get(s.name, best.first);
        if (!naive || !best_row) continue;
        t.add_row({s.name, pa::strf("%.0f", s.kv_bytes() / 1048576.0), pa::strf("%.2f", naive->us_median), best.first,
                   pa::strf("%.2f", best.second), pa::strf("%.2fx", naive->us_median / best.second),
                   pa::strf("%.1f", *best_row->pct_read_bw), auto_pick(s), idx.us(s.name, "auto"),
                   std::to_string(static_cast<long long>(s.B) * s.Hkv)});
    }
    t.print();
}

// Each step's time on a shape (the best TGS where the step has one): what each idea bought.
void print_ladder(const pa::RowIndex& idx, const std::vector<pa::DecodeShape>& shapes) {
    std::printf("\nThe ladder: each step's L2-cold median (us; best TGS in brackets), lesson 01 first\n");
    pa::TextTable t({"shape", "lesson01", "1 thread groups", "2 wide loads", "3 grouped logits", "4 online softmax",
                     "5 ring", "6 grouped", "6 per head", "9 tensor cores", "10 copy warps", "11 bulk rows", "12 unit copies", "13 aligned units", "14 two streams"});
    auto best = [&](const std::string& shape, const std::string& prefix) {
        const auto b = idx.best_of(shape, names_of(prefix));
        return b.first == "-" ? std::string("-") : pa::strf("%.2f (%s)", b.second, b.first.substr(b.first.size() - 2).c_str());
    };
    for (const auto& s : shapes)
        t.add_row({s.name, idx.us(s.name, "naive"), best(s.name, "thread_groups"), best(s.name, "wide_loads"),
                   idx.us(s.name, "grouped_logits_tgs8"), idx.us(s.name, "online_softmax_tgs8"),
                   idx.us(s.name, "cp_async_ring_tgs8"), best(s.name, "grouped"), best(s.name, "per_head"), idx.us(s.name, "grouped_mma"),
                   idx.us(s.name, "grouped_mma_ws"), idx.us(s.name, "grouped_mma_bulk"), idx.us(s.name, "grouped_mma_units"),
                   idx.us(s.name, "grouped_mma_aligned"), idx.us(s.name, "grouped_mma_two_streams")});
    t.print();
    std::printf("(TGS in brackets: 4, 8 or 16, written as the name's last two characters)\n");
}

void print_tgs_sweep(const pa::RowIndex& idx) {
    std::printf("\nTGS sweep (bf16, H8/Hkv4, L2-cold medians, us)\n");
    pa::TextTable t({"shape", "wide tgs4", "wide tgs8", "wide tgs16", "gr tgs4", "gr tgs8", "gr tgs16", "best"});
    for (const auto& s : pa::table_c_tgs_sweep()) {
        std::vector<std::string> names = names_of("wide_loads");
        for (const auto& n : names_of("grouped")) names.push_back(n);
        std::vector<std::string> row = {s.name};
        for (const auto& n : names) row.push_back(idx.us(s.name, n));
        row.push_back(idx.best_of(s.name, names).first);
        t.add_row(row);
    }
    t.print();
    std::printf("(the H200 post's TGS sweep beside these: the README tables written by plots/tables.py)\n");
}

void summarize(const std::vector<pa::ResultRow>& rows, const std::vector<pa::DecodeShape>& shapes) {
    const pa::RowIndex idx(rows);
    std::set<std::string> measured;
    for (const auto& s : shapes) measured.insert(s.name);
    auto has_all = [&](const std::vector<pa::DecodeShape>& list) {
        return std::all_of(list.begin(), list.end(), [&](const pa::DecodeShape& s) { return measured.count(s.name) > 0; });
    };
    if (has_all(pa::table_a())) print_table_a(idx);
    print_ladder(idx, shapes);
    if (has_all(pa::table_c_tgs_sweep())) print_tgs_sweep(idx);
    std::printf("\nauto rule: grouped_mma_ws (then grouped_mma where its ring does not fit), except per_head_tgs4 for\n"
                "B * Hkv < %d and for groups above 32; grouped_mma_bulk first where grouped_mma_ws runs two CTAs\n"
                "per SM, grouped_mma_units before all, grouped_mma_aligned before it where the grid of\n"
                "8-head CTAs is at least %.1f times the SMs, and grouped_mma_two_streams before all where it is\n"
                "%.1f to 1 times the SMs with contexts of at least %d tokens; the first of these the GPU can run\n",
                lesson02::kMinGroupedCtas, lesson02::step13::kGridOverSms, lesson02::step14::kMinGridOfSms,
                lesson02::step14::kMinContext);
}

// --timeline: step 10's timeline build (common/timeline.h) on each shape, checked against the
// reference, then launched L2-cold kTimelineLaunches times; the launch whose last CTA ends
// in the middle is summarised.
constexpr int kTimelineLaunches = 7;

struct TimelineRun {
    pa::TimelineSummary sum;
    std::vector<double> spans;  // first CTA start -> last CTA end, every launch
};

TimelineRun run_timeline(const pa::DecodeShape& s, uint64_t seed, const pa::DeviceInfo& info,
                         const pa::DecodeReference& reference) {
    const pa::DecodeProblem p = pa::make_decode_problem(s, seed);
    pa::DeviceDecodeProblem dev(p, pa::l2_cold_copies(p, info));
    const int tile = lesson02::step10::tile_tokens(s.D);
    const int stride = pa::timeline_stride(s.max_ctx(), tile);
    pa::DeviceBuffer<uint64_t> record(static_cast<size_t>(s.B) * s.Hkv * stride);
    pa::DecodeVariant v;
    v.name = "grouped_mma_ws_timeline";
    v.launch = [&](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        lesson02::step10::launch_timeline(a, record.get(), stride, st);
    };
    const pa::CheckResult check = pa::check_once(v, dev, p, reference(p));
    if (!check.pass) throw std::runtime_error("the timeline build of grouped_mma_ws failed its check on " + s.name + ": " + check.message);

    TimelineRun run;
    std::vector<pa::TimelineSummary> sums;
    for (int i = 0; i < 3 + kTimelineLaunches; ++i) {  // three warm-up launches, then the recorded ones
        v.launch(dev.args(i % dev.copies()), nullptr);  // the copy the previous launch did not read: L2-cold
        CUDA_CHECK(cudaDeviceSynchronize());
        if (i < 3) continue;
        sums.push_back(pa::summarize_timeline(record.download(), stride, s.Hkv, s.ctx, tile, s.D * 2));
        run.spans.push_back(sums.back().end_last);
    }
    std::sort(sums.begin(), sums.end(), [](const auto& a, const auto& b) { return a.end_last < b.end_last; });
    run.sum = sums[sums.size() / 2];
    return run;
}

// The shapes --timeline runs (default: Table A); exits with 2 and one line on a shape the
// timeline build cannot run on this GPU.
void refuse_timeline_shapes(const std::vector<pa::DecodeShape>& shapes, const pa::DeviceInfo& info) {
    for (const auto& s : shapes) {
        const std::string memory = pa::pools_why_not(s, info, pa::l2_cold_copies(s, info), pa::host_memory_bytes());
        if (!memory.empty()) {
            std::fprintf(stderr, "error: %s: %s\n", kProgram, memory.c_str());
            std::exit(pa::kExitBadInput);
        }
        const std::string why = lesson02::step10::timeline_why_not(s, info);
        if (!why.empty()) {
            std::fprintf(stderr, "error: %s: --timeline cannot run %s: %s\n", kProgram, s.name.c_str(), why.c_str());
            std::exit(pa::kExitBadInput);
        }
    }
}

int timeline_main(const pa::Flags& f, const std::vector<pa::DecodeShape>& shapes, const pa::DeviceInfo& info,
                  const pa::DecodeReference& reference) {
    refuse_timeline_shapes(shapes, info);
    const double read_bw = pa::measured_read_bandwidth_gbps(info);
    pa::print_run_header("Lesson 02: where step 10 (grouped_mma_ws) spends its time (--timeline)", info, read_bw);
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
        const pa::TimelineSummary& m = run.sum;
        const bool steady = m.steady_gbps > 0;  // else the launch was mostly start-up
        const pa::LaunchGeometry g = lesson02::step10::geometry(s, info);
        t.add_row({s.name, std::to_string(m.ctas), std::to_string(m.sms_used), std::to_string(g.ctas_per_sm),
                   pa::strf("%.1f/%.1f", m.first_copy_p50, m.first_copy_max),
                   pa::strf("%.1f/%.1f", m.first_tile_p50, m.first_tile_max), pa::strf("%.1f", m.landed_10),
                   pa::strf("%.1f", m.landed_50), pa::strf("%.1f", m.landed_90), pa::strf("%.1f", m.landed_all),
                   pa::strf("%.1f/%.1f/%.1f", m.end_first, m.end_p50, m.end_last), steady ? pa::strf("%.0f", m.steady_gbps) : "-",
                   steady ? pa::strf("%.1f", 100.0 * m.steady_gbps / read_bw) : "-",
                   pa::strf("%.1f/%.1f/%.1f", m.cta_gbps_p10, m.cta_gbps_p50, m.cta_gbps_p90),
                   steady ? pa::strf("%.1f", m.at_steady_us) : "-", steady ? pa::strf("%.1f", m.head_us) : "-",
                   steady ? pa::strf("%.1f", m.tail_us) : "-"});
        pa::ResultRow r = pa::decode_row(info, "02", "grouped_mma_ws_timeline", s);
        r.l2 = "cold";
        std::vector<double> spans = run.spans;
        std::sort(spans.begin(), spans.end());
        r.us_median = m.end_last;  // first CTA start -> last CTA end of the launch shown
        r.us_min = spans.front();
        r.bytes = m.bytes;
        r.gbps = m.bytes / (m.end_last * 1e-6) / 1e9;
        r.read_bw_gbps = read_bw;
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

// One --copy-rate row: GB/s in all and per CTA, % of the streaming read.
pa::ResultRow copy_rate_row(const lesson02::CopyRate& c, const pa::DeviceInfo& info, double read_bw) {
    const double bytes = static_cast<double>(c.bytes_per_cta) * c.ctas;
    const double gbps = bytes / (c.us_median * 1e-6) / 1e9;
    pa::ResultRow r;
    r.gpu = info.short_name;
    r.lesson = "02";
    r.variant = c.reader;
    r.shape = c.shape;
    r.dtype = "-";
    r.ctx = "-";
    if (const std::optional<pa::DecodeShape> s = pa::find_shape(c.shape)) {
        r.dtype = pa::dtype_name(s->dtype);
        r.B = s->B;
        r.H = s->H;
        r.Hkv = s->Hkv;
        r.D = s->D;
        r.ctx = std::to_string(s->max_ctx());
        r.block_size = c.reader.find("pages16") != std::string::npos ? s->block_size : 0;
    }
    r.l2 = "cold";
    r.us_median = c.us_median;
    r.us_min = c.us_min;
    r.bytes = bytes;
    r.gbps = gbps;
    r.read_bw_gbps = read_bw;
    r.pct_read_bw = 100.0 * gbps / read_bw;
    r.check = "-";
    r.set_extra("ctas", std::to_string(c.ctas));
    r.set_extra("ctas_per_sm", std::to_string(c.ctas_per_sm));
    r.set_extra("copy_bytes", std::to_string(c.copy_bytes));
    r.set_extra("issuers", std::to_string(c.issuers));
    r.set_extra("inflight_bytes", std::to_string(c.inflight_bytes));
    r.set_extra("gbps_per_cta", pa::strf("%.2f", gbps / c.ctas));
    return r;
}

// --copy-rate: CTAs that only read (copy_rate.h), L2-cold: contiguous readers alone and in full
// grids, then step 12's copies on the big Table A shapes' K and V and on mqa-B64-ctx2k's (one KV
// head of 64 sequences: the split-k shape), contiguous and paged.
int copy_rate_main(const pa::Flags& f, const pa::DeviceInfo& info) {
    const double read_bw = pa::measured_read_bandwidth_gbps(info);
    pa::print_run_header("Lesson 02: what one CTA's copies read (--copy-rate)", info, read_bw);
    std::string skipped, items_skipped;
    const std::vector<lesson02::CopyRate> rates = lesson02::measure_copy_rates(info, &skipped);
    const std::vector<std::string> item_shapes = {"llama7b-B8-ctx2k", "llama7b-B32-ctx1k", "llama70b-B16-ctx8k",
                                                  "mqa-B64-ctx2k"};
    const std::vector<lesson02::CopyRate> items = lesson02::measure_item_reads(info, item_shapes, &items_skipped);
    std::printf("\nEach CTA reads its own contiguous bytes into shared memory and drops them; L2-cold medians of 7\n"
                "launches. bulk_<N>: cp.async.bulk copies of N bytes into a ring of three tiles, a copy per issuing\n"
                "thread a tile (256 from 128 threads: step 11's rows; 4096 from 8: step 12's units; _one: all from\n"
                "one thread); loads_16: 1024 threads with eight 16-byte loads each in flight.\n");
    if (!skipped.empty()) std::printf("bulk readers: %s\n", skipped.c_str());
    std::vector<pa::ResultRow> rows;
    pa::TextTable t({"reader", "copy B", "threads", "in flight KiB", "CTAs", "CTA/SM", "MiB per CTA", "us",
                     "GB/s per CTA", "GB/s", "% read BW"});
    for (const auto& c : rates) {
        const pa::ResultRow r = copy_rate_row(c, info, read_bw);
        t.add_row({c.reader, std::to_string(c.copy_bytes), std::to_string(c.issuers),
                   std::to_string(c.inflight_bytes / 1024), std::to_string(c.ctas), std::to_string(c.ctas_per_sm),
                   std::to_string(c.bytes_per_cta >> 20), pa::strf("%.1f", c.us_median),
                   pa::strf("%.1f", *r.gbps / c.ctas), pa::strf("%.0f", *r.gbps), pa::strf("%.1f", *r.pct_read_bw)});
        rows.push_back(r);
    }
    std::printf("\n");
    t.print();
    std::printf("\nStep 12's copies without its math: a CTA per (sequence, KV head), 128-token tiles of K and V in\n"
                "turn into a ring of three tiles. items_contiguous, items_pages16: a 4 KiB unit per thread from 8\n"
                "threads, K and V contiguous ([B, Hkv, ctx, D]) or in pages of 16 tokens under a shuffled block\n"
                "table, units 128-byte aligned; _pad16: units 16 bytes apart modulo 128, as step 12 lays them out;\n"
                "items_loads_pages16: the same pages in 16-byte cp.async from 128 threads; shares_pages16_<n>: the\n"
                "aligned copies in equal shares of the batch's tiles, n CTAs per SM.\n");
    if (!items_skipped.empty()) std::printf("item readers: %s\n", items_skipped.c_str());
    pa::TextTable ti({"shape", "layout", "CTAs", "CTA/SM", "KiB per CTA", "us", "GB/s", "% read BW"});
    for (const auto& c : items) {
        const pa::ResultRow r = copy_rate_row(c, info, read_bw);
        ti.add_row({c.shape, c.reader, std::to_string(c.ctas), std::to_string(c.ctas_per_sm),
                    std::to_string(c.bytes_per_cta >> 10), pa::strf("%.1f", c.us_median), pa::strf("%.0f", *r.gbps),
                    pa::strf("%.1f", *r.pct_read_bw)});
        rows.push_back(r);
    }
    if (!ti.empty()) {
        std::printf("\n");
        ti.print();
    }
    pa::write_csv_or_exit(kProgram, f.csv, rows);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    pa::DecodeLessonSpec spec;
    spec.program = kProgram;
    spec.lesson = "02";
    spec.title = "Lesson 02: thread groups, wide loads, the GQA-grouped CTA, tensor cores, copy warps";
    spec.extra_usage =
        "Variants (the ladder): thread_groups_tgs{4,8,16} (step 1), wide_loads_tgs{4,8,16} (step 2),\n"
        "grouped_logits_tgs8 (step 3), online_softmax_tgs8 (step 4), cp_async_ring_tgs8 (step 5),\n"
        "per_head_tgs{4,8,16} and grouped_tgs{4,8,16} (step 6), tile_stream (step 7), grouped_mma_qk (step 8),\n"
        "grouped_mma (step 9), grouped_mma_ws (step 10),\n"
        "grouped_mma_bulk (step 11, sm_90), grouped_mma_units (step 12, sm_90), grouped_mma_aligned (step 13, sm_90),\n"
        "grouped_mma_two_streams (step 14, sm_90),\n"
        "auto; the measurement adds lesson 01 (naive) for comparison.\n";
    spec.variants = lesson02::all_variants();
    pa::DecodeVariant naive = lesson01::variant();
    naive.lesson = "01";
    spec.baselines = {naive};
    spec.check_shapes = pa::decode_check_shapes();
    for (const auto& s : lesson02::uneven_check_shapes()) spec.check_shapes.push_back(s);
    spec.bench_shapes = pa::table_a();
    for (const auto& s : pa::table_c()) spec.bench_shapes.push_back(s);
    spec.reference = [](const pa::DecodeProblem& p) { return pa::reference::softmax_decode(p); };
    spec.annotate = [](const pa::DecodeShape& s, pa::ResultRow& row) {
        if (row.variant == "auto") row.set_extra("auto_pick", auto_pick(s));
    };
    spec.summarize = summarize;
    pa::LessonMode timeline;
    timeline.flag = {"--timeline", false,
                     "--timeline   where step 10 (grouped_mma_ws) spends its time on each shape (default: Table A), D 128",
                     {"--check", "--bench", "--variant"}};
    timeline.run = [reference = spec.reference](const pa::Flags& f) {
        if (f.has("--copy-rate")) {
            std::fprintf(stderr, "error: %s: --timeline and --copy-rate are two runs; ask for one\n", kProgram);
            return pa::kExitBadInput;
        }
        const std::vector<pa::DecodeShape> shapes = pa::select_shapes_or_exit(kProgram, f, pa::table_a());
        const pa::DeviceInfo info = pa::require_gpu(kProgram);
        try {
            return timeline_main(f, shapes, info, reference);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
            return 1;
        }
    };
    pa::LessonMode copy_rate;
    copy_rate.flag = {"--copy-rate", false,
                      "--copy-rate  what one CTA's copies read: bulk copies of a row, a unit, 16 KiB; plain loads;\n"
                      "             step 12's own bytes",
                      {"--check", "--bench", "--variant", "--shape"}};
    copy_rate.run = [](const pa::Flags& f) {
        const pa::DeviceInfo info = pa::require_gpu(kProgram);
        try {
            return copy_rate_main(f, info);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
            return 1;
        }
    };
    spec.modes = {timeline, copy_rate};
    return pa::run_decode_lesson(argc, argv, spec);
}
