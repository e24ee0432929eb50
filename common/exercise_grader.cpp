#include "exercise_grader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "flags.h"
#include "random.h"
#include "table.h"

namespace pa::exercise {

int exit_code(Outcome o) {
    switch (o) {
        case Outcome::pass: return 0;
        case Outcome::wrong: return 1;
        case Outcome::bad_input: return kExitBadInput;
        case Outcome::no_gpu: return kExitNoGpu;
        case Outcome::hang: return 4;
    }
    return 1;
}

const char* outcome_name(Outcome o) {
    switch (o) {
        case Outcome::pass: return "pass";
        case Outcome::wrong: return "wrong";
        case Outcome::bad_input: return "bad_input";
        case Outcome::no_gpu: return "no_gpu";
        case Outcome::hang: return "hang";
    }
    return "wrong";
}

const std::vector<KernelInstance>& decode_instances() {
    static const std::vector<KernelInstance> list = {{DType::fp16, 64}, {DType::fp16, 128}, {DType::bf16, 128}};
    return list;
}

std::vector<GradeCase> standard_decode_cases(uint64_t seed) {
    std::vector<GradeCase> cases;
    for (const DecodeShape& s : table_a()) {
        GradeCase c;
        c.name = s.name;
        c.group = "catalogue";
        c.shape = s;
        c.teaches = "a Table A shape";
        cases.push_back(c);
    }
    for (const GradeCase& c : seeded_cases(seed, 8, decode_instances())) cases.push_back(c);
    for (const GradeCase& c : decode_edge_cases(DType::fp16, 128)) cases.push_back(c);
    for (const auto& [t, D] : {std::pair{DType::bf16, 128}, std::pair{DType::fp16, 64}})
        for (const GradeCase& c : decode_edge_cases(t, D))
            if (c.name.rfind("mixed-lengths", 0) == 0) cases.push_back(c);
    return cases;
}

std::vector<GradeCase> seeded_cases(uint64_t seed, int count, const std::vector<KernelInstance>& instances, int max_ctx,
                                    int max_B) {
    std::vector<GradeCase> out;
    if (instances.empty()) return out;
    Rng rng(seed, 0x5eedca5e);
    for (int i = 0; i < count; ++i) {
        const KernelInstance k = instances[rng.below(instances.size())];
        const int B = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(max_B)));
        const int Hkv = 1 << rng.below(4);    // 1, 2, 4, 8
        const int group = 1 << rng.below(4);  // 1, 2, 4, 8
        const int block_size = 8 << rng.below(3);
        std::vector<int> ctx(B);
        for (int& c : ctx) c = std::max(1, static_cast<int>(std::lround(std::pow(static_cast<double>(max_ctx), rng.uniform()))));
        GradeCase c;
        c.name = "seed-" + std::to_string(i);
        c.group = "seeded";
        c.shape = make_shape(strf("seeded-%d-B%d-H%d-Hkv%d-D%d-bs%d-%s", i, B, Hkv * group, Hkv, k.D, block_size,
                                  dtype_name(k.dtype)),
                             Hkv * group, Hkv, ctx, k.D, block_size, k.dtype);
        c.teaches = "a shape drawn from the grading seed: the answer must not depend on knowing the shapes";
        c.windows = window_set(c.shape, seed + static_cast<uint64_t>(i));
        out.push_back(c);
    }
    return out;
}

std::vector<GradeCase> decode_edge_cases(DType dtype, int D) {
    std::string suffix;
    if (dtype != DType::fp16) suffix += std::string("-") + dtype_name(dtype);
    if (D != 128) suffix += "-D" + std::to_string(D);
    auto make = [&](const std::string& name, int H, int Hkv, std::vector<int> ctx, int block_size, double q_scale,
                    const std::string& teaches) {
        GradeCase c;
        c.name = name + suffix;
        c.group = "edge";
        c.shape = make_shape("edge-" + c.name, H, Hkv, std::move(ctx), D, block_size, dtype);
        c.q_scale = q_scale;
        c.teaches = teaches;
        c.windows = window_set(c.shape, 0);
        return c;
    };
    return {
        make("ctx-1", 8, 8, {1, 1}, 16, 2.0, "one token: its weight is 1 and the output is its V row"),
        make("partial-last-page", 8, 2, {17, 31, 40}, 16, 2.0,
             "the last page is partly filled; its other slots hold NaN and must not be read"),
        make("pow2-pm1-warp", 4, 4, {31, 32, 33, 63, 64, 65}, 16, 2.0,
             "lengths around a warp: tokens in only some lanes of the last warp"),
        make("pow2-pm1-cta", 8, 4, {127, 128, 129, 255, 256, 257}, 16, 2.0,
             "lengths around the CTA's 128 threads: some threads own one token more than others"),
        make("pow2-pm1-long", 4, 2, {1023, 1024, 1025}, 32, 2.0, "lengths around 2^10"),
        make("mixed-lengths", 8, 2, {1, 2000, 17, 640, 129, 3}, 16, 2.0,
             "one batch of very different lengths: each CTA must use its own sequence's length"),
        make("mqa", 32, 1, {300, 1000}, 16, 2.0, "MQA: 32 query heads share one KV head"),
        make("pages-random-order", 8, 8, {777, 1500}, 8, 2.0,
             "many small pages in random order: every token's page comes from the block table"),
        make("large-logits", 32, 8, {1000, 777, 300, 129}, 16, 500.0,
             "logits in the thousands: exp(logit - m) overflows unless m is the max over every thread's logits"),
    };
}

std::vector<int> window_set(const DecodeShape& s, uint64_t seed) {
    std::set<int> w = {1, 2, 7, 64, 129, kFullWindow};
    const int lo = *std::min_element(s.ctx.begin(), s.ctx.end());
    const int hi = s.max_ctx();
    for (int x : {lo - 1, lo, hi - 1, hi})
        if (x >= 1) w.insert(x);
    if (seed != 0) {
        Rng rng(seed, 0x3d0f);
        for (int i = 0; i < 2; ++i) w.insert(1 + static_cast<int>(rng.below(static_cast<uint64_t>(hi))));
    }
    return {w.begin(), w.end()};
}

DecodeProblem make_grade_problem(const GradeCase& c, uint64_t seed) {
    DecodeProblem p = make_decode_problem(c.shape, seed);
    if (c.q_scale != 1.0)
        for (auto& x : p.q) x = encode(p.shape.dtype, static_cast<float>(decode(p.shape.dtype, x) * c.q_scale));
    if (c.adjust) c.adjust(p);
    return p;
}

bool rows_are_scaled_answer(const std::vector<double>& out, const std::vector<double>& ref, int rows, int row_len,
                            double tol, double* median_factor) {
    if (out.size() != ref.size() || out.size() != static_cast<size_t>(rows) * row_len || rows == 0) return false;
    double resid2 = 0, fitted2 = 0;
    std::vector<double> factors;
    for (int r = 0; r < rows; ++r) {
        double orr = 0, rr = 0;
        for (int i = 0; i < row_len; ++i) {
            const double o = out[static_cast<size_t>(r) * row_len + i], x = ref[static_cast<size_t>(r) * row_len + i];
            if (!std::isfinite(o)) return false;
            orr += o * x;
            rr += x * x;
        }
        if (rr == 0) continue;
        const double a = orr / rr;
        factors.push_back(a);
        for (int i = 0; i < row_len; ++i) {
            const double x = ref[static_cast<size_t>(r) * row_len + i];
            const double d = out[static_cast<size_t>(r) * row_len + i] - a * x;
            resid2 += d * d;
            fitted2 += a * a * x * x;
        }
    }
    if (factors.empty() || fitted2 == 0) return false;
    std::sort(factors.begin(), factors.end());
    const double median = factors[factors.size() / 2];
    if (median_factor) *median_factor = median;
    const bool all_one = std::all_of(factors.begin(), factors.end(), [&](double a) { return std::fabs(a - 1) < 10 * tol; });
    return !all_one && std::sqrt(resid2 / fitted2) < 10 * tol;
}

std::string diagnose(const std::vector<uint16_t>& out, const std::vector<double>& ref, DType t, const CheckResult& r,
                     const std::vector<Suspect>& suspects, int rows, int row_len) {
    if (r.pass) return "";
    if (r.nan_count > 0) return r.message + " (an element not written, a NaN slot read, or exp overflowed)";
    for (const auto& s : suspects)
        if (compare_output(out, s.output(), t).pass) return s.message;
    std::vector<double> o(out.size());
    for (size_t i = 0; i < out.size(); ++i) o[i] = decode(t, out[i]);
    double factor = 0;
    if (rows_are_scaled_answer(o, ref, rows, row_len, tolerance_for(t).rel, &factor))
        return strf("each output row is the answer times a factor (median %.3g): the softmax numerators and the sum "
                    "that divides them disagree",
                    factor);
    return r.message;
}

std::string speed_band(double ratio) {
    if (ratio <= 0) return "not measured";
    if (ratio <= 1.2) return "full marks";
    if (ratio <= 1.5) return "good";
    if (ratio <= 2.0) return "slow";
    return "very slow";
}

double GradeReport::speed_ratio() const {
    if (speed.empty()) return 0;
    double log_sum = 0;
    for (const auto& s : speed) {
        if (s.ratio() <= 0) return 0;
        log_sum += std::log(s.ratio());
    }
    return std::exp(log_sum / static_cast<double>(speed.size()));
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\t': o += "\\t"; break;
            case '\r': o += "\\r"; break;
            default:
                if (c < 0x20) o += strf("\\u%04x", c);
                else o += static_cast<char>(c);
        }
    }
    return o;
}

static std::string q(const std::string& s) { return "\"" + json_escape(s) + "\""; }
static std::string num(double x) { return std::isfinite(x) ? strf("%.6g", x) : "null"; }

std::string to_json(const GradeReport& r) {
    int passed = 0, failed = 0, skipped = 0;
    for (const auto& c : r.cases) (c.skipped ? skipped : c.pass ? passed : failed)++;
    std::string j = "{\n";
    j += "  \"program\": " + q(r.program) + ",\n";
    j += "  \"build\": " + q(r.build) + ",\n";
    j += "  \"exercise\": " + q(r.exercise) + ",\n";
    j += "  \"seed\": " + std::to_string(r.seed) + ",\n";
    j += "  \"gpu\": " + q(r.gpu) + ",\n";
    j += "  \"outcome\": " + q(outcome_name(r.outcome)) + ",\n";
    j += "  \"exit_code\": " + std::to_string(exit_code(r.outcome)) + ",\n";
    j += "  \"summary\": " + q(r.summary) + ",\n";
    j += strf("  \"passed\": %d,\n  \"failed\": %d,\n  \"skipped\": %d,\n", passed, failed, skipped);
    j += "  \"cases\": [";
    for (size_t i = 0; i < r.cases.size(); ++i) {
        const CaseResult& c = r.cases[i];
        j += i ? ",\n    " : "\n    ";
        j += "{\"name\": " + q(c.name) + ", \"group\": " + q(c.group) + ", \"window\": " +
             (c.window >= kFullWindow ? std::string("null") : std::to_string(c.window)) +
             ", \"pass\": " + (c.pass ? "true" : "false") + ", \"skipped\": " + (c.skipped ? "true" : "false") +
             ", \"rel_err\": " + num(c.rel_err) + ", \"max_abs_err\": " + num(c.max_abs_err) +
             ", \"message\": " + q(c.message) + "}";
    }
    j += r.cases.empty() ? "],\n" : "\n  ],\n";
    if (r.speed.empty()) {
        j += "  \"speed\": null\n";
    } else {
        j += "  \"speed\": {\"ratio\": " + num(r.speed_ratio()) + ", \"band\": " + q(speed_band(r.speed_ratio())) +
             ", \"recheck_pass\": " + (r.recheck_pass ? "true" : "false") + ", \"shapes\": [";
        for (size_t i = 0; i < r.speed.size(); ++i) {
            const SpeedShape& s = r.speed[i];
            j += (i ? ", " : "") + std::string("{\"shape\": ") + q(s.shape) + ", \"student_us\": " + num(s.student_us) +
                 ", \"lesson_us\": " + num(s.lesson_us) + ", \"ratio\": " + num(s.ratio()) + "}";
        }
        j += "]}\n";
    }
    j += "}\n";
    return j;
}

bool write_json(const std::string& path, const GradeReport& r, std::string* err) {
    std::ofstream f(path, std::ios::binary);
    if (!f) {
        if (err) *err = "cannot write the JSON result to '" + path + "'";
        return false;
    }
    f << to_json(r);
    f.close();
    if (!f) {
        if (err) *err = "cannot write the JSON result to '" + path + "'";
        return false;
    }
    return true;
}

GradeFlags parse_grade_flags(int argc, char** argv, const std::string& program, const std::string& usage,
                             const std::vector<std::string>& exercises) {
    std::string names;
    for (const std::string& e : exercises) names += (names.empty() ? "" : "|") + e;
    const std::vector<LessonFlag> flags = {
        {"--grade", false, "--grade            grade (the default)", {}},
        {"--exercise", true, "--exercise NAME    " + names + " (default " + exercises.front() + ")", {}},
        {"--json", true, "--json FILE        also write the result as JSON (for a class-grading script)", {}},
        {"--timeout", true, "--timeout S        seconds one launch may take before it counts as a hang (default 10)", {}},
    };
    const Flags f = parse_flags_or_exit(argc, argv, usage, flags);
    if (f.check_only || f.bench_only || !f.shapes.empty() || f.explicit_shape() || f.dtype || !f.csv.empty() ||
        !f.variant.empty())
        exit_bad_input(program, "the grader chooses its own shapes and variants: it takes --exercise, --seed, --json, "
                                "--timeout, --iters");
    GradeFlags g;
    g.exercise = f.has("--exercise") ? f.lesson.at("--exercise") : exercises.front();
    if (std::find(exercises.begin(), exercises.end(), g.exercise) == exercises.end())
        exit_bad_input(program, "--exercise must be " + names + ", got '" + g.exercise + "'");
    try {
        g.timeout_s = f.lesson_real("--timeout", 1, 3600, 10);
    } catch (const FlagError& e) {
        exit_bad_input(program, e.what());
    }
    if (f.has("--json") && f.lesson.at("--json").empty()) exit_bad_input(program, "--json needs a file name");
    g.json = f.has("--json") ? f.lesson.at("--json") : "";
    g.seed = f.seed;
    g.iters = std::min(f.iters, 20);
    return g;
}

}  // namespace pa::exercise
