// lesson04_pow2_padding: checks the three split-k pipelines (lesson 03's partition kernel,
// then the pad_scratch, pow2_lanes or loop reduce) against the CPU reference, then measures
// the reduces over segment counts from 1 to 1024: scratch bytes, the reduce alone (L2-hot
// and L2-cold) and partition + reduce.
//
//   lesson04_pow2_padding                          check, then the segment sweep
//   lesson04_pow2_padding --check                  check only (what the sanitizer tests run)
//   lesson04_pow2_padding --bench --csv out.csv    the segment sweep only, its rows as CSV
//   lesson04_pow2_padding --shape mqa-B16-ctx4k    check and time the three pipelines on a shape
//   lesson04_pow2_padding --plans [--csv out.csv]  lesson 03's plans with pow2_lanes as their reduce
//                                                  (auto, split_pow2_<P>) beside lesson 03's auto, on
//                                                  Table A, Table B and the long shapes
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ceilings.cuh"
#include "cuda_check.cuh"
#include "decode_driver.cuh"
#include "decode_reference.h"
#include "device_buffer.cuh"
#include "lesson04.h"
#include "split_k.h"
#include "timer.cuh"

namespace {

const char* kProgram = "lesson04_pow2_padding";

// The segment sweep: H8 / Hkv4 / D128, B 1 and 16, partition 32, ctx = 32 * (splits - 1) + 1
// (one token in the last segment, as the post's ctx 513 at partition 32).
constexpr int kSweepPartition = 32;
constexpr int kSweepH = 8, kSweepHkv = 4, kSweepD = 128;
constexpr int kSweepBatches[] = {1, 16};
constexpr int kWarmup = 10;

std::vector<int> sweep_segments() {
    std::vector<int> out;
    for (int s = 1; s <= 17; ++s) out.push_back(s);
    for (int p = 32; p <= lesson04::kMaxSegments; p *= 2)
        for (int s : {p - 1, p, p + 1})
            if (s <= lesson04::kMaxSegments) out.push_back(s);
    return out;
}

int sweep_ctx(int segments) { return kSweepPartition * (segments - 1) + 1; }

// Bytes the reduce must move: the real scratch entries (m, l, acc) in, the output back.
long long reduce_bytes_needed(int B, int H, int D, int segments) {
    return lesson04::scratch_bytes(B, H, D, segments) + 2LL * B * H * D;
}

// `copies` copies of a filled scratch, one allocation per array: the L2-cold reduce rotates
// through them (their total exceeds twice the L2). A small scratch has more copies than
// one timing uses, so none is read twice: the L2 is flushed once they are made, so that
// copies just written do not start out in it.
class ScratchCopies {
  public:
    ScratchCopies(const lesson03::SplitScratch& src, int B, int H, int D, int copies, long long l2_bytes)
        : entries_(static_cast<size_t>(B) * H * src.max_partitions), D_(D), partitions_(src.max_partitions), copies_(copies),
          m_(entries_ * copies), l_(entries_ * copies), acc_(entries_ * D * copies) {
        replicate(m_.get(), src.m, entries_);
        replicate(l_.get(), src.l, entries_);
        replicate(acc_.get(), src.acc, entries_ * D_);
        pa::DeviceBuffer<unsigned char> flush(static_cast<size_t>(2 * l2_bytes));
        flush.fill_bytes(0);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    int count() const { return copies_; }
    lesson03::SplitScratch copy(int i) {
        lesson03::SplitScratch s;
        s.m = m_.get() + entries_ * i;
        s.l = l_.get() + entries_ * i;
        s.acc = acc_.get() + entries_ * D_ * i;
        s.max_partitions = partitions_;
        return s;
    }

  private:
    // copy 0 from src, then double the filled part until every copy is there
    void replicate(float* dst, const float* src, size_t n) {
        CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice));
        for (int filled = 1; filled < copies_;) {
            const int more = std::min(filled, copies_ - filled);
            CUDA_CHECK(cudaMemcpy(dst + n * filled, dst, n * more * sizeof(float), cudaMemcpyDeviceToDevice));
            filled += more;
        }
    }
    size_t entries_;
    int D_, partitions_, copies_;
    pa::DeviceBuffer<float> m_, l_, acc_;
};

struct Measured {
    pa::Timing timing;
    pa::CheckResult check;
};

void add_row(std::vector<pa::ResultRow>& rows, const pa::DeviceInfo& info, double read_bw, lesson04::Fix fix,
             const pa::DecodeShape& s, int segments, const char* stage, const char* l2, const Measured& m, long long bytes) {
    pa::ResultRow r = pa::decode_row(info, "04", lesson04::fix_name(fix), s);
    r.l2 = l2;
    r.us_median = m.timing.us_median;
    r.us_min = m.timing.us_min;
    r.bytes = static_cast<double>(bytes);
    r.gbps = bytes / (m.timing.us_median * 1e-6) / 1e9;
    r.read_bw_gbps = read_bw;
    r.pct_read_bw = 100.0 * *r.gbps / read_bw;
    r.check = m.check.pass ? "PASS" : "FAIL";
    r.rel_err = m.check.rel_err;
    r.set_extra("splits", std::to_string(segments));
    r.set_extra("partition_size", std::to_string(kSweepPartition));
    r.set_extra("scratch_bytes",
                std::to_string(lesson04::scratch_bytes(s.B, s.H, s.D, lesson04::scratch_partitions(fix, segments))));
    r.set_extra("stage", stage);
    rows.push_back(r);
}

// One sweep point: every fix's pipeline checked, timed L2-hot and L2-cold (K/V copies
// rotating), checked again; then its reduce alone, L2-hot and over rotating scratch copies.
void measure_point(const pa::DeviceInfo& info, double read_bw, const pa::Flags& f, const std::vector<lesson04::Fix>& fixes,
                   int B, int segments, pa::DType dtype, std::vector<pa::ResultRow>& rows, int& failures) {
    const int ctx = sweep_ctx(segments);
    const pa::DecodeShape s =
        pa::make_shape(pa::decode_shape_name("h8kv4", B, ctx), kSweepH, kSweepHkv, std::vector<int>(B, ctx), kSweepD, 16, dtype);
    const pa::DecodeProblem p = pa::make_decode_problem(s, f.seed);
    const std::vector<double> ref = pa::reference::softmax_decode(p);
    pa::DeviceDecodeProblem dev(p, pa::l2_cold_copies(p, info));
    auto check = [&] {
        CUDA_CHECK(cudaDeviceSynchronize());
        return pa::compare_output(dev.download_output(), ref, dtype);
    };
    auto worse = [](const pa::CheckResult& a, const pa::CheckResult& b) { return a.pass ? b : a; };
    for (lesson04::Fix fix : fixes) {
        lesson04::Scratch scratch;
        auto pipeline = [&](int copy) { lesson04::launch_pipeline(fix, dev.args(copy), kSweepPartition, scratch, nullptr); };
        dev.poison_output();
        pipeline(0);
        const pa::CheckResult first = check();
        Measured total_hot{pa::time_kernel([&](int) { pipeline(0); }, 1, kWarmup, f.iters), first};
        Measured total_cold{pa::time_kernel(pipeline, dev.copies(), kWarmup, f.iters), first};
        total_hot.check = total_cold.check = worse(first, check());  // the last timed launch's output

        // the reduce alone, over the scratch the pipeline just filled
        const int parts = lesson04::scratch_partitions(fix, segments);
        const lesson03::SplitScratch filled = scratch.get(B, s.H, s.D, parts, nullptr);
        const pa::PagedDecodeArgs a = dev.args(0);
        dev.poison_output();
        Measured reduce_hot{pa::time_kernel([&](int) { lesson04::launch_reduce(fix, a, filled, nullptr); }, 1, kWarmup, f.iters), {}};
        reduce_hot.check = check();
        ScratchCopies copies(filled, B, s.H, s.D, pa::cold_copies(lesson04::scratch_bytes(B, s.H, s.D, parts), info.l2_bytes),
                             info.l2_bytes);
        dev.poison_output();
        Measured reduce_cold{
            pa::time_kernel([&](int c) { lesson04::launch_reduce(fix, a, copies.copy(c), nullptr); }, copies.count(), kWarmup, f.iters),
            {}};
        reduce_cold.check = check();

        const long long reduce_bytes = reduce_bytes_needed(B, s.H, s.D, segments);
        const long long total_bytes = pa::decode_bytes_needed(s);
        add_row(rows, info, read_bw, fix, s, segments, "reduce", "hot", reduce_hot, reduce_bytes);
        add_row(rows, info, read_bw, fix, s, segments, "reduce", "cold", reduce_cold, reduce_bytes);
        add_row(rows, info, read_bw, fix, s, segments, "total", "hot", total_hot, total_bytes);
        add_row(rows, info, read_bw, fix, s, segments, "total", "cold", total_cold, total_bytes);
        for (const Measured* m : {&reduce_hot, &reduce_cold, &total_hot})
            if (!m->check.pass) {
                ++failures;
                std::fprintf(stderr, "FAIL %s %s: %s\n", lesson04::fix_name(fix), s.name.c_str(), m->check.message.c_str());
                break;
            }
    }
}

void print_sweep(const std::vector<pa::ResultRow>& rows, int B, const pa::DeviceInfo& info) {
    std::map<std::string, const pa::ResultRow*> at;  // splits|variant|stage|l2
    std::set<int> measured;
    for (const auto& r : rows)
        if (r.B == B) {
            at[r.get_extra("splits") + "|" + r.variant + "|" + r.get_extra("stage") + "|" + r.l2] = &r;
            measured.insert(std::stoi(r.get_extra("splits")));
        }
    auto us = [&](int seg, const char* v, const char* stage, const char* l2) {
        const auto it = at.find(std::to_string(seg) + "|" + v + "|" + stage + "|" + l2);
        return it == at.end() ? std::string("-") : pa::strf("%.2f", it->second->us_median);
    };
    std::printf("\nB = %d: H%d/Hkv%d/D%d, partition %d, ctx = %d * (splits - 1) + 1; medians, us\n", B, kSweepH, kSweepHkv,
                kSweepD, kSweepPartition, kSweepPartition);
    pa::TextTable t({"splits", "ctx", "scratch KiB pad", "real", "reduce cold: pad", "pow2", "loop", "reduce hot: pad", "pow2",
                     "loop", "total cold: pad", "pow2", "loop", "total hot: pad", "pow2", "loop"});
    for (int seg : measured) {
        std::vector<std::string> row = {
            std::to_string(seg), std::to_string(sweep_ctx(seg)),
            pa::strf("%.1f", lesson04::scratch_bytes(B, kSweepH, kSweepD, lesson04::next_pow2(seg)) / 1024.0),
            pa::strf("%.1f", lesson04::scratch_bytes(B, kSweepH, kSweepD, seg) / 1024.0)};
        for (const char* stage : {"reduce", "total"})
            for (const char* l2 : {"cold", "hot"})
                for (const char* v : {"pad_scratch", "pow2_lanes", "loop"}) row.push_back(us(seg, v, stage, l2));
        t.add_row(row);
    }
    t.print();
    std::printf("(%s; reduce: the reduce alone over a filled scratch, L2-cold rotating scratch copies; total: lesson 03's\n"
                "partition kernel + the reduce, L2-cold rotating K/V copies; pad_scratch's scratch and partition grid hold\n"
                "next_pow2(splits) entries per head)\n",
                info.name.c_str());
}

// --plans: per shape, lesson 03's auto against this lesson's (lesson 03's rule for a parallel
// reduce, with pow2_lanes), and the best fixed partition size under pow2_lanes. L2-cold medians.
void summarize_plans(const std::vector<pa::ResultRow>& rows, const std::vector<pa::DecodeShape>& shapes) {
    const pa::RowIndex idx(rows);
    std::vector<std::string> fixed, all = {"lesson03_auto", "auto"};
    for (const auto& v : lesson04::plan_variants())
        if (v.name != "auto") fixed.push_back(v.name);
    all.insert(all.end(), fixed.begin(), fixed.end());
    std::printf("\nLesson 03's auto, and its plan with pow2_lanes as the reduce (auto); L2-cold medians, us. right (+):\n"
                "auto within 5 %% of the best measured here\n");
    pa::TextTable t({"shape", "lesson03_auto", "auto", "speedup", "auto runs", "% read BW", "best split_pow2", "us", "right"});
    int right = 0, counted = 0;
    for (const auto& s : shapes) {
        const pa::ResultRow* l3 = idx.get(s.name, "lesson03_auto");
        const pa::ResultRow* au = idx.get(s.name, "auto");
        if (!l3 || !au) continue;
        const auto best = idx.best_of(s.name, all);
        const auto best_fixed = idx.best_of(s.name, fixed);
        const bool ok = au->us_median <= 1.05 * best.second;
        right += ok;
        ++counted;
        t.add_row({s.name, pa::strf("%.2f", l3->us_median), pa::strf("%.2f", au->us_median),
                   pa::strf("%.2fx", l3->us_median / au->us_median), au->get_extra("auto_pick"),
                   au->pct_read_bw ? pa::strf("%.1f", *au->pct_read_bw) : "-", best_fixed.first,
                   best_fixed.first == "-" ? "-" : pa::strf("%.2f", best_fixed.second), ok ? "+" : "-"});
    }
    t.print();
    std::printf("auto right on %d of %d shapes\n", right, counted);
}

int run_plans(int argc, char** argv) {
    pa::DecodeLessonSpec spec;
    spec.program = kProgram;
    spec.lesson = "04";
    spec.title = "Lesson 04 --plans: lesson 03's plans with pow2_lanes as the reduce";
    spec.extra_usage = "--plans: auto and split_pow2_{128,256,512,1024,4096} beside lesson 03's auto (lesson03_auto)\n";
    spec.variants = lesson04::plan_variants();
    pa::DecodeVariant l3 = lesson03::auto_variant();
    l3.name = "lesson03_auto";
    spec.baselines = {l3};
    spec.check_shapes = lesson04::check_shapes();
    spec.bench_shapes = lesson03::bench_shapes();  // the shapes lesson 03 measures
    spec.reference = [](const pa::DecodeProblem& p) { return pa::reference::softmax_decode(p); };
    spec.annotate = [variants = spec.variants, l3](const pa::DecodeShape& s, pa::ResultRow& row) {
        const pa::DeviceInfo& info = pa::current_device_info();
        for (const auto& v : variants)
            if (v.name == row.variant) row.set_extra("splits", std::to_string(v.geometry(s, info).partitions));
        if (row.variant == l3.name) row.set_extra("splits", std::to_string(l3.geometry(s, info).partitions));
        if (row.variant == "auto") row.set_extra("auto_pick", lesson04::auto_pick(s, info));
    };
    spec.summarize = summarize_plans;
    // the measurement only (the check of these variants is part of --check), unless asked
    std::vector<char*> args;
    bool check = false;
    for (int i = 0; i < argc; ++i) {
        if (std::string(argv[i]) == "--plans") continue;
        check = check || std::string(argv[i]) == "--check";
        args.push_back(argv[i]);
    }
    char bench_flag[] = "--bench";
    if (!check) args.push_back(bench_flag);
    return pa::run_decode_lesson(static_cast<int>(args.size()), args.data(), spec);
}

int run_sweep(const pa::Flags& f, const std::vector<lesson04::Fix>& fixes) {
    const pa::DeviceInfo info = pa::require_gpu(kProgram);
    try {
        const pa::DType dtype = f.dtype.value_or(pa::DType::bf16);
        const double read_bw = pa::measured_read_bandwidth_gbps(info);
        std::printf("\nThe segment sweep (seed %llu, %d timed launches after %d warm-up, %s)\n",
                    static_cast<unsigned long long>(f.seed), f.iters, kWarmup, pa::dtype_name(dtype));
        pa::print_run_header("Lesson 04: pad_scratch, pow2_lanes and loop over segment counts", info, read_bw);
        std::vector<pa::ResultRow> rows;
        int failures = 0;
        for (int B : kSweepBatches)
            for (int seg : sweep_segments()) measure_point(info, read_bw, f, fixes, B, seg, dtype, rows, failures);
        for (int B : kSweepBatches) print_sweep(rows, B, info);
        std::printf("%s\n", failures == 0 ? "every sweep point matched the reference before and after timing"
                                          : pa::strf("%d sweep points FAILED their check", failures).c_str());
        pa::write_csv_or_exit(kProgram, f.csv, rows);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv) {
    pa::DecodeLessonSpec spec;
    spec.program = kProgram;
    spec.lesson = "04";
    spec.title = "Lesson 04: pow2 padding of the split-k reduce (pad_scratch, pow2_lanes, loop)";
    spec.extra_usage =
        "Variants, each the full split-k pipeline (lesson 03's partition kernel, then a reduce): pad_scratch (scratch\n"
        "and partition grid padded to next_pow2(segments), reduce without masks), pow2_lanes (scratch at its real size,\n"
        "reduce over next_pow2 lanes with -inf padding lanes), loop (a plain loop over the segments). Partition size:\n"
        "the smallest of 32..512 giving at most 1024 segments (CTAs column: the partition kernel's grid).\n"
        "The measurement (no flags, or --bench without a shape) is the segment sweep: splits 1..17, 31..33, 63..65,\n"
        "..., 1023, 1024 at H8/Hkv4/D128 bf16 (--dtype changes it), B 1 and 16, partition 32, ctx = 32 * (splits - 1)\n"
        "+ 1: scratch bytes, the reduce alone and partition + reduce, L2-hot and L2-cold; CSV columns add splits,\n"
        "partition_size, scratch_bytes, stage (reduce or total). With --shape or --B ...: the check, then the usual\n"
        "per-shape table of the three pipelines on those shapes.\n"
        "--plans   lesson 03's plans with pow2_lanes as their reduce, measured on Table A, Table B and the long\n"
        "          shapes: auto (lesson 03's rule for a parallel reduce: its choice of kernel and partition\n"
        "          size without the floor of 1/16 of the context or 64-token partitions; the reduce launched as a\n"
        "          programmatic dependent on sm_90) and split_pow2_{128,256,512,1024,4096} (fixed partitions),\n"
        "          beside lesson 03's auto (lesson03_auto); the check of these variants is part of --check.\n";
    spec.variants = lesson04::all_variants();
    spec.variants.push_back(lesson04::auto_variant());
    for (const auto& v : lesson04::plan_variants())
        if (v.name != "auto") spec.check_only_variants.push_back(v);
    spec.check_shapes = lesson04::check_shapes();
    spec.bench_shapes = spec.check_shapes;  // only used with explicit shapes, which replace it
    spec.reference = [](const pa::DecodeProblem& p) { return pa::reference::softmax_decode(p); };
    spec.annotate = [](const pa::DecodeShape& s, pa::ResultRow& row) {
        lesson04::Fix fix;
        if (!lesson04::parse_fix(row.variant, &fix)) return;
        const int ps = lesson04::partition_size_for(s);
        const int segments = lesson04::segments_for(s.max_ctx(), ps);
        row.set_extra("splits", std::to_string(segments));
        row.set_extra("partition_size", std::to_string(ps));
        row.set_extra("scratch_bytes",
                      std::to_string(lesson04::scratch_bytes(s.B, s.H, s.D, lesson04::scratch_partitions(fix, segments))));
        row.set_extra("stage", "total");
    };

    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--plans") return run_plans(argc, argv);
    const pa::Flags f = pa::parse_flags_or_exit(argc, argv, pa::decode_lesson_usage(spec));
    const bool sweep = !f.check_only && f.shapes.empty() && !f.explicit_shape();
    if (!sweep) return pa::run_decode_lesson(argc, argv, spec);  // --check, or the driver's table on given shapes

    // The sweep's variants, checked by name before anything touches the GPU.
    std::vector<lesson04::Fix> fixes;
    for (const auto& v : pa::select_variants(kProgram, f.variant, spec.variants)) {
        lesson04::Fix fix;
        if (lesson04::parse_fix(v.name, &fix)) fixes.push_back(fix);
    }
    int rc = 0;
    if (!f.bench_only) {  // the check first, exactly as `--check` runs it
        std::vector<char*> check_argv(argv, argv + argc);
        char check_flag[] = "--check";
        check_argv.push_back(check_flag);
        rc = pa::run_decode_lesson(static_cast<int>(check_argv.size()), check_argv.data(), spec);
        if (rc != 0 && rc != 1) return rc;  // no GPU, bad input: nothing to measure
    }
    const int sweep_rc = run_sweep(f, fixes);
    return rc != 0 ? rc : sweep_rc;
}
