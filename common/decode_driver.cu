#include "decode_driver.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "ceilings.cuh"
#include "cuda_check.cuh"
#include "timer.cuh"

namespace pa {

DeviceDecodeProblem::DeviceDecodeProblem(const DecodeProblem& p, int copies)
    : shape_(p.shape), max_blocks_per_seq_(p.table.max_blocks_per_seq), scale_(static_cast<float>(p.scale)), q_(p.q), out_(p.q.size()), block_table_(p.table.table), context_lens_(p.table.context_lens), context_lens_host_(p.table.context_lens) {
    k_ = device_copies(p.cache.k, copies);
    v_ = device_copies(p.cache.v, copies);
}

PagedDecodeArgs DeviceDecodeProblem::args(int copy) {
    const DecodeShape& s = shape_;
    PagedDecodeArgs a;
    a.out = out_.get();
    a.q = q_.get();
    a.k_cache = k_[copy].get();
    a.v_cache = v_[copy].get();
    a.block_table = block_table_.get();
    a.context_lens = context_lens_.get();
    a.context_lens_host = context_lens_host_.data();
    a.B = s.B;
    a.H = s.H;
    a.Hkv = s.Hkv;
    a.D = s.D;
    a.block_size = s.block_size;
    a.max_blocks_per_seq = max_blocks_per_seq_;
    a.max_ctx = s.max_ctx();
    a.scale = scale_;
    a.dtype = s.dtype;
    return a;
}

CheckResult check_once(const DecodeVariant& v, DeviceDecodeProblem& dev, const DecodeProblem& p,
                       const std::vector<double>& ref, int copy) {
    dev.poison_output();
    v.launch(dev.args(copy), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return compare_output(dev.download_output(), ref, p.shape.dtype);
}

long long decode_bytes_needed(const DecodeShape& s) {
    long long pages = 0;
    for (int c : s.ctx) pages += (c + s.block_size - 1) / s.block_size;
    const long long qo = 2LL * s.B * s.H * s.D * 2;  // q in, out back, 2 bytes each
    return s.kv_bytes() + qo + pages * 4 + s.B * 4LL;
}

static std::string ctx_column(const DecodeShape& s) {
    const bool uniform = std::all_of(s.ctx.begin(), s.ctx.end(), [&](int c) { return c == s.ctx[0]; });
    return uniform ? std::to_string(s.ctx[0]) : "mixed";
}

int l2_cold_copies(const DecodeShape& s, const DeviceInfo& info) { return cold_copies(decode_pool_bytes(s), info.l2_bytes); }

int l2_cold_copies(const DecodeProblem& p, const DeviceInfo& info) { return l2_cold_copies(p.shape, info); }

ResultRow decode_row(const DeviceInfo& info, const std::string& lesson, const std::string& variant, const DecodeShape& s) {
    ResultRow r;
    r.gpu = info.short_name;
    r.lesson = lesson;
    r.variant = variant;
    r.shape = s.name;
    r.dtype = dtype_name(s.dtype);
    r.B = s.B;
    r.H = s.H;
    r.Hkv = s.Hkv;
    r.D = s.D;
    r.ctx = ctx_column(s);
    r.block_size = s.block_size;
    return r;
}

std::vector<ResultRow> bench_decode_shape(const BenchSetup& setup, const DecodeProblem& p, const std::vector<double>& ref,
                                          const std::vector<DecodeVariant>& variants) {
    const DecodeShape& s = p.shape;
    DeviceDecodeProblem dev(p, l2_cold_copies(p, setup.info));
    const long long bytes = decode_bytes_needed(s);
    std::vector<ResultRow> rows;
    for (const auto& v : variants) {
        const std::string why = v.why_not(s, setup.info);
        if (!why.empty()) continue;  // the caller decides whether that is an error
        const CheckResult before = check_once(v, dev, p, ref);
        const Timing hot = time_kernel([&](int) { v.launch(dev.args(0), nullptr); }, 1, setup.warmup, setup.iters);
        const Timing cold = time_kernel([&](int c) { v.launch(dev.args(c), nullptr); }, dev.copies(), setup.warmup, setup.iters);
        CUDA_CHECK(cudaDeviceSynchronize());
        // the output of the last timed launch, checked again (a race shows up here)
        const CheckResult after = compare_output(dev.download_output(), ref, s.dtype);
        const bool pass = before.pass && after.pass;
        const LaunchGeometry g = v.geometry(s, setup.info);
        for (int cold_run = 0; cold_run < 2; ++cold_run) {
            const Timing& t = cold_run ? cold : hot;
            ResultRow r = decode_row(setup.info, v.lesson.empty() ? setup.lesson : v.lesson, v.name, s);
            r.l2 = cold_run ? "cold" : "hot";
            r.us_median = t.us_median;
            r.us_min = t.us_min;
            r.bytes = static_cast<double>(bytes);
            r.gbps = bytes / (t.us_median * 1e-6) / 1e9;
            r.read_bw_gbps = setup.read_bw_gbps;
            r.pct_read_bw = 100.0 * *r.gbps / setup.read_bw_gbps;
            r.check = pass ? "PASS" : "FAIL";
            r.rel_err = std::max(before.rel_err, after.rel_err);
            r.set_extra("ctas", std::to_string(g.ctas));
            r.set_extra("ctas_per_sm", std::to_string(g.ctas_per_sm));
            r.set_extra("waves", strf("%.2f", g.waves(setup.info.sms)));
            rows.push_back(r);
        }
        if (!pass)
            std::fprintf(stderr, "FAIL %s %s: %s\n", v.name.c_str(), s.name.c_str(),
                         (before.pass ? after.message : before.message).c_str());
    }
    return rows;
}

void print_run_header(const std::string& title, const DeviceInfo& info, double read_bw_gbps) {
    std::printf("%s\n", title.c_str());
    std::printf("GPU: %s\n", info.summary().c_str());
    if (read_bw_gbps > 0) std::printf("measured streaming read bandwidth: %.0f GB/s\n", read_bw_gbps);
}

void print_decode_rows(const std::vector<ResultRow>& rows, const DeviceInfo& info, double read_bw_gbps) {
    TextTable t({"shape", "variant", "dtype", "CTAs", "CTA/SM", "waves", "hot us", "cold us", "cold min", "cold GB/s",
                 "% read BW", "check", "rel err"});
    for (size_t i = 0; i + 1 < rows.size(); i += 2) {
        const ResultRow& hot = rows[i];
        const ResultRow& cold = rows[i + 1];
        t.add_row({hot.shape, hot.variant, hot.dtype, hot.get_extra("ctas"), hot.get_extra("ctas_per_sm"),
                   hot.get_extra("waves"), strf("%.2f", hot.us_median), strf("%.2f", cold.us_median),
                   strf("%.2f", cold.us_min), strf("%.0f", *cold.gbps), strf("%.1f", *cold.pct_read_bw), cold.check,
                   strf("%.1e", *cold.rel_err)});
    }
    t.print();
    std::printf("(%s, %d SMs; %% read BW = cold GB/s over the measured %.0f GB/s; medians of timed launches)\n",
                info.name.c_str(), info.sms, read_bw_gbps);
}

int run_decode_checks(const std::vector<DecodeShape>& shapes, const std::vector<DecodeVariant>& variants,
                      const DecodeReference& reference, uint64_t seed, const DeviceInfo& info) {
    int total = 0, passed = 0;
    std::vector<std::pair<std::pair<std::string, std::string>, int>> not_run;  // (variant, reason) -> shapes
    std::printf("correctness check (seed %llu): reference in double from the rounded inputs\n",
                static_cast<unsigned long long>(seed));
    for (const auto& s : shapes) {
        const DecodeProblem p = make_decode_problem(s, seed);
        const std::vector<double> ref = reference(p);
        DeviceDecodeProblem dev(p);
        for (const auto& v : variants) {
            const std::string why = v.why_not(s, info);
            if (!why.empty()) {
                const std::pair<std::string, std::string> key{v.name, why};
                auto it = std::find_if(not_run.begin(), not_run.end(), [&](const auto& e) { return e.first == key; });
                if (it == not_run.end()) it = not_run.insert(not_run.end(), {key, 0});
                ++it->second;
                continue;
            }
            const CheckResult r = check_once(v, dev, p, ref);
            ++total;
            if (r.pass) ++passed;
            std::printf("  %s %-10s %-40s rel %.2e max abs %.2e%s%s\n", r.pass ? "PASS" : "FAIL", v.name.c_str(),
                        s.name.c_str(), r.rel_err, r.max_abs_err, r.pass ? "" : "  ", r.message.c_str());
        }
    }
    for (const auto& [key, n] : not_run)  // one line per variant and reason
        std::printf("  (%s not run on %d shape%s: %s)\n", key.first.c_str(), n, n == 1 ? "" : "s", key.second.c_str());
    std::printf("%d/%d %s\n", passed, total, passed == total ? "PASS" : "FAIL");
    return total - passed;
}

void refuse_unrunnable_shapes(const std::string& program, const std::vector<DecodeShape>& shapes,
                              const std::vector<DecodeVariant>& variants, const DeviceInfo& info, bool timed) {
    for (const auto& s : shapes) {
        const std::string memory = pools_why_not(s, info, timed ? l2_cold_copies(s, info) : 1, host_memory_bytes());
        if (!memory.empty()) {
            std::fprintf(stderr, "error: %s: %s\n", program.c_str(), memory.c_str());
            std::exit(kExitBadInput);
        }
        std::string why;
        bool any = false;
        for (const auto& v : variants) {
            const std::string w = v.why_not(s, info);
            if (w.empty()) any = true;
            else if (why.empty()) why = w;
        }
        if (!any) {
            std::fprintf(stderr, "error: %s: %s\n", program.c_str(), why.c_str());
            std::exit(kExitBadInput);
        }
    }
}

std::vector<DecodeVariant> select_variants(const std::string& program, const std::string& name,
                                           const std::vector<DecodeVariant>& all) {
    if (name.empty()) return all;
    std::string names;
    for (const auto& v : all) {
        if (v.name == name) return {v};
        names += (names.empty() ? "" : ", ") + v.name;
    }
    std::fprintf(stderr, "error: %s: unknown variant '%s' (this lesson has: %s)\n", program.c_str(), name.c_str(),
                 names.c_str());
    std::exit(kExitBadInput);
}

std::vector<DecodeShape> select_shapes_or_exit(const std::string& program, const Flags& f,
                                               const std::vector<DecodeShape>& defaults) {
    try {
        return select_shapes(f, defaults);
    } catch (const FlagError& e) {
        std::fprintf(stderr, "error: %s: %s\n", program.c_str(), e.what());
        std::exit(kExitBadInput);
    }
}

void write_csv_or_exit(const std::string& program, const std::string& path, const std::vector<ResultRow>& rows) {
    if (path.empty()) return;
    std::string err;
    if (!write_csv(path, rows, &err)) {
        std::fprintf(stderr, "error: %s: %s\n", program.c_str(), err.c_str());
        std::exit(kExitBadInput);
    }
    std::printf("wrote %zu rows to %s\n", rows.size(), path.c_str());
}

std::vector<DecodeVariant> available_variants(const std::vector<DecodeVariant>& variants, const DeviceInfo& info) {
    std::vector<DecodeVariant> out;
    for (const auto& v : variants) {
        if (info.cc() >= v.min_cc) out.push_back(v);
        else std::printf("%s: unavailable on %s (sm_%d): needs %s\n", v.name.c_str(), info.name.c_str(), info.cc(), v.needs.c_str());
    }
    return out;
}

RowIndex::RowIndex(const std::vector<ResultRow>& rows) {
    for (const auto& r : rows) rows_.emplace_back(r.shape + "|" + r.variant + "|" + r.l2, &r);
}

const ResultRow* RowIndex::get(const std::string& shape, const std::string& variant, const std::string& l2) const {
    const std::string key = shape + "|" + variant + "|" + l2;
    for (const auto& [k, r] : rows_)
        if (k == key) return r;
    return nullptr;
}

std::string RowIndex::us(const std::string& shape, const std::string& variant, const std::string& l2) const {
    const ResultRow* r = get(shape, variant, l2);
    return r ? strf("%.2f", r->us_median) : "-";
}

std::pair<std::string, double> RowIndex::best_of(const std::string& shape, const std::vector<std::string>& variants) const {
    std::pair<std::string, double> best{"-", 1e300};
    for (const auto& n : variants)
        if (const ResultRow* r = get(shape, n))
            if (r->us_median < best.second) best = {n, r->us_median};
    return best;
}

namespace {

// "  name1, name2 (sm_90), ..." wrapped at about 100 columns.
std::string name_lines(const std::vector<DecodeVariant>& vs) {
    std::string out, line = " ";
    for (size_t i = 0; i < vs.size(); ++i) {
        std::string item = " " + vs[i].name + (vs[i].min_cc > 80 ? " (" + vs[i].needs + ")" : "") + (i + 1 < vs.size() ? "," : "");
        if (line.size() + item.size() > 100) {
            out += line + "\n";
            line = " ";
        }
        line += item;
    }
    return out + line + "\n";
}

}  // namespace

std::string decode_lesson_usage(const DecodeLessonSpec& spec) {
    std::string u = decode_usage(spec.program, spec.extra_usage);
    u += "Variants (--variant NAME; the check and the measurement run each):\n" + name_lines(spec.variants);
    if (!spec.check_only_variants.empty()) u += "Checked, not measured:\n" + name_lines(spec.check_only_variants);
    if (!spec.baselines.empty()) u += "Measured beside them (earlier lessons):\n" + name_lines(spec.baselines);
    return u;
}

int run_decode_lesson(int argc, char** argv, const DecodeLessonSpec& spec) {
    std::vector<LessonFlag> mode_flags;
    for (const auto& m : spec.modes) mode_flags.push_back(m.flag);
    mode_flags.insert(mode_flags.end(), spec.flags.begin(), spec.flags.end());
    const Flags f = parse_flags_or_exit(argc, argv, decode_lesson_usage(spec), mode_flags);
    for (const auto& m : spec.modes)
        if (f.has(m.flag.name)) return m.run(f);
    std::vector<LessonPass> passes;
    try {
        if (spec.passes) passes = spec.passes(f);
    } catch (const FlagError& e) {
        std::fprintf(stderr, "error: %s: %s\n", spec.program.c_str(), e.what());
        return kExitBadInput;
    }
    if (passes.empty()) passes.push_back(LessonPass{});
    auto apply = [&](const LessonPass& pass) {
        if (pass.apply) pass.apply();
    };
    // Names and shapes are checked before looking for a GPU, so a typo is exit code 2 everywhere.
    std::vector<DecodeVariant> all = spec.variants;
    all.insert(all.end(), spec.check_only_variants.begin(), spec.check_only_variants.end());
    const std::vector<DecodeVariant> selected = select_variants(spec.program, f.variant, all);
    const std::vector<DecodeShape> check_shapes = select_shapes_or_exit(spec.program, f, spec.check_shapes);
    const std::vector<DecodeShape> bench_shapes = select_shapes_or_exit(spec.program, f, spec.bench_shapes);
    const DeviceInfo info = require_gpu(spec.program);
    try {
        print_run_header(spec.title, info, 0);
        const std::vector<DecodeVariant> variants = available_variants(selected, info);
        if (variants.empty()) {
            std::fprintf(stderr, "error: %s: no selected variant runs on this GPU\n", spec.program.c_str());
            return kExitNoGpu;
        }
        if (!f.bench_only) refuse_unrunnable_shapes(spec.program, check_shapes, variants, info, false);
        if (!f.check_only) refuse_unrunnable_shapes(spec.program, bench_shapes, variants, info, true);
        int failures = 0;
        if (!f.bench_only)
            for (const auto& pass : passes) {
                apply(pass);
                if (!pass.name.empty()) std::printf("-- %s --\n", pass.name.c_str());
                failures += run_decode_checks(check_shapes, variants, spec.reference, f.seed, info);
            }
        if (f.check_only) return failures == 0 ? 0 : 1;

        BenchSetup setup;
        setup.info = info;
        setup.lesson = spec.lesson;
        setup.iters = f.iters;
        setup.read_bw_gbps = measured_read_bandwidth_gbps(info);
        std::printf("\nmeasurement (seed %llu, %d timed launches after %d warm-up; L2-cold rotates K/V copies over > 2x L2)\n",
                    static_cast<unsigned long long>(f.seed), setup.iters, setup.warmup);
        std::printf("measured streaming read bandwidth: %.0f GB/s\n", setup.read_bw_gbps);
        std::vector<DecodeVariant> measured;
        for (const auto& v : variants) {
            const bool check_only = std::any_of(spec.check_only_variants.begin(), spec.check_only_variants.end(),
                                                [&](const DecodeVariant& c) { return c.name == v.name; });
            if (!check_only || !f.variant.empty()) measured.push_back(v);  // named with --variant: measured too
        }
        if (f.variant.empty()) {
            const std::vector<DecodeVariant> base = available_variants(spec.baselines, info);
            measured.insert(measured.begin(), base.begin(), base.end());
        }
        std::vector<ResultRow> rows;
        for (size_t si = 0; si < bench_shapes.size(); ++si) {
            const DecodeShape& s = bench_shapes[si];
            // progress on stderr (the table comes at the end, on stdout): a long run says where it is
            std::fflush(stdout);
            std::fprintf(stderr, "measuring shape %zu/%zu: %s\n", si + 1, bench_shapes.size(), s.name.c_str());
            const DecodeProblem p = make_decode_problem(s, f.seed);
            for (const auto& pass : passes) {
                apply(pass);
                const std::vector<double> ref = spec.reference(p);
                auto r = bench_decode_shape(setup, p, ref, measured);
                for (auto& row : r) {
                    if (spec.annotate) spec.annotate(s, row);
                    failures += row.check == "FAIL" && row.l2 == "cold";
                }
                rows.insert(rows.end(), r.begin(), r.end());
            }
        }
        print_decode_rows(rows, info, setup.read_bw_gbps);
        if (f.variant.empty() && spec.summarize) spec.summarize(rows, bench_shapes);
        write_csv_or_exit(spec.program, f.csv, rows);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", spec.program.c_str(), e.what());
        return 1;
    }
}

}  // namespace pa
