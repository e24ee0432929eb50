// The host side of the exercise graders (common/exercise_grader.h) and the sliding-window
// reference, without a GPU: seeded shapes are deterministic and differ between seeds, the edge
// cases are there, the inputs make an all-zeros or plain-mean answer fail, the large-logits case
// can catch a max that misses lane 16 or the last warp, failures are named, JSON and exit codes.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "decode_reference.h"
#include "exercise_grader.h"
#include "flags.h"
#include "paged_cache.h"

namespace {

using namespace pa::exercise;

const std::vector<KernelInstance> kInstances = {{pa::DType::fp16, 64}, {pa::DType::fp16, 128}, {pa::DType::bf16, 128}};

std::string describe(const std::vector<GradeCase>& cases) {
    std::string s;
    for (const auto& c : cases) {
        s += c.shape.name + ":";
        for (int x : c.shape.ctx) s += std::to_string(x) + ",";
        s += ";";
    }
    return s;
}

// Sliding-window attention written out directly (no decode_with_weights, no SoftmaxP).
std::vector<double> brute_force_window(const pa::DecodeProblem& p, long long window) {
    const pa::PagedDecodeView v(p);
    const int B = v.B(), H = v.H(), D = v.D(), group = H / v.Hkv();
    std::vector<double> out(static_cast<size_t>(B) * H * D, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h) {
            const int n = v.ctx(b);
            const int first = n > window ? static_cast<int>(n - window) : 0;
            std::vector<double> s;
            for (int t = first; t < n; ++t) {
                double dot = 0;
                for (int d = 0; d < D; ++d) dot += v.q(b, h, d) * v.k(b, t, h / group, d);
                s.push_back(dot * p.scale);
            }
            const double m = *std::max_element(s.begin(), s.end());
            double sum = 0;
            for (double& x : s) sum += (x = std::exp(x - m));
            for (int t = first; t < n; ++t)
                for (int d = 0; d < D; ++d)
                    out[(static_cast<size_t>(b) * H + h) * D + d] += s[t - first] / sum * v.v(b, t, h / group, d);
        }
    return out;
}

std::vector<uint16_t> encode_all(pa::DType t, const std::vector<double>& x) {
    std::vector<uint16_t> o(x.size());
    for (size_t i = 0; i < x.size(); ++i) o[i] = pa::encode(t, static_cast<float>(x[i]));
    return o;
}

struct Uniform {
    std::vector<double> operator()(const std::vector<double>& s) const {
        return std::vector<double>(s.size(), 1.0 / static_cast<double>(s.size()));
    }
};

}  // namespace

TEST_CASE("exit codes: 0 pass, 1 wrong, 2 bad input, 3 no GPU, 4 hang", "[exercise]") {
    CHECK(exit_code(Outcome::pass) == 0);
    CHECK(exit_code(Outcome::wrong) == 1);
    CHECK(exit_code(Outcome::bad_input) == pa::kExitBadInput);
    CHECK(exit_code(Outcome::no_gpu) == pa::kExitNoGpu);
    CHECK(exit_code(Outcome::hang) == 4);
    CHECK(std::string(outcome_name(Outcome::hang)) == "hang");
}

TEST_CASE("seeded cases: the same seed gives the same shapes, another seed others, all valid", "[exercise]") {
    const auto a = seeded_cases(20241121, 8, kInstances), b = seeded_cases(20241121, 8, kInstances);
    const auto c = seeded_cases(987654321, 8, kInstances);
    REQUIRE(a.size() == 8);
    CHECK(describe(a) == describe(b));
    CHECK(describe(a) != describe(c));
    std::set<std::string> names;
    for (const auto& x : a) {
        names.insert(x.name);
        REQUIRE_NOTHROW(pa::validate_decode_shape(x.shape));
        CHECK(x.group == "seeded");
        CHECK(std::any_of(kInstances.begin(), kInstances.end(),
                          [&](const KernelInstance& k) { return k.dtype == x.shape.dtype && k.D == x.shape.D; }));
        for (int ctx : x.shape.ctx) CHECK((ctx >= 1 && ctx <= 3000));
        CHECK(std::is_sorted(x.windows.begin(), x.windows.end()));
        CHECK(x.windows.front() == 1);
        CHECK(x.windows.back() == kFullWindow);
    }
    CHECK(names.size() == a.size());
    // a different seed also draws different problems for the same shape
    GradeCase k = a[0];
    CHECK(make_grade_problem(k, 1).q != make_grade_problem(k, 2).q);
}

TEST_CASE("edge cases: ctx 1, partial last page, 2^k +- 1, mixed, MQA, random pages, large logits", "[exercise]") {
    const auto cases = decode_edge_cases(pa::DType::fp16, 128);
    auto find = [&](const std::string& name) -> const GradeCase& {
        auto it = std::find_if(cases.begin(), cases.end(), [&](const GradeCase& c) { return c.name == name; });
        REQUIRE(it != cases.end());
        return *it;
    };
    CHECK(find("ctx-1").shape.max_ctx() == 1);
    const auto& partial = find("partial-last-page").shape;
    CHECK(std::all_of(partial.ctx.begin(), partial.ctx.end(), [&](int c) { return c % partial.block_size != 0; }));
    for (const char* name : {"pow2-pm1-warp", "pow2-pm1-cta", "pow2-pm1-long"}) {
        const auto& s = find(name).shape;
        std::set<int> offsets;  // each length is 2^k - 1, 2^k or 2^k + 1
        for (int c : s.ctx)
            for (int d : {-1, 0, 1})
                if (c - d > 0 && ((c - d) & (c - d - 1)) == 0) offsets.insert(d);
        CHECK(offsets == std::set<int>{-1, 0, 1});
    }
    const auto& mixed = find("mixed-lengths").shape;
    CHECK(*std::max_element(mixed.ctx.begin(), mixed.ctx.end()) > 100 * *std::min_element(mixed.ctx.begin(), mixed.ctx.end()));
    CHECK(find("mqa").shape.Hkv == 1);
    CHECK(find("pages-random-order").shape.block_size == 8);
    CHECK(find("large-logits").q_scale >= 100);
    for (const auto& c : cases) {
        REQUIRE_NOTHROW(pa::validate_decode_shape(c.shape));
        const auto p = make_grade_problem(c, 5);
        // pages in random order, never the identity
        bool identity = true;
        for (int s = 0; s < p.table.B; ++s)
            for (int pg = 0; pg * c.shape.block_size < c.shape.ctx[s]; ++pg)
                identity = identity && p.table.block(s, pg) == s * p.table.max_blocks_per_seq + pg;
        CHECK_FALSE(identity);
    }
    // the other dtypes and head sizes are named apart
    CHECK(decode_edge_cases(pa::DType::bf16, 128)[0].name == "ctx-1-bf16");
    CHECK(decode_edge_cases(pa::DType::fp16, 64)[0].name == "ctx-1-D64");
}

TEST_CASE("window sets: 1, the lengths and one less, full; a seed adds its own", "[exercise]") {
    const pa::DecodeShape s = pa::make_shape("w", 8, 2, {300, 17}, 128, 16);
    const auto w = window_set(s, 0);
    for (int x : {1, 16, 17, 299, 300, kFullWindow}) CHECK(std::count(w.begin(), w.end(), x) == 1);
    CHECK(window_set(s, 11) != window_set(s, 12));
}

TEST_CASE("sliding-window reference: equals a brute-force one, and full attention for W >= ctx", "[exercise]") {
    GradeCase c;
    c.shape = pa::make_shape("sw", 8, 2, {1, 17, 64, 129}, 64, 16);
    for (auto t : {pa::DType::fp16, pa::DType::bf16}) {
        c.shape.dtype = t;
        const pa::DecodeProblem p = make_grade_problem(c, 42);
        for (long long w : {1LL, 2LL, 16LL, 17LL, 63LL, 128LL, 129LL, 1000LL}) {
            const auto ref = pa::reference::sliding_window_decode(p, w);
            const auto brute = brute_force_window(p, w);
            REQUIRE(ref.size() == brute.size());
            double worst = 0;
            for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - brute[i]));
            CHECK(worst < 1e-12);
        }
        CHECK(pa::reference::sliding_window_decode(p, 129) == pa::reference::softmax_decode(p));
        CHECK(pa::reference::sliding_window_decode(p, 128) != pa::reference::softmax_decode(p));
    }
}

TEST_CASE("grading inputs: an all-zeros or plain-mean-of-V output fails every case but ctx 1", "[exercise]") {
    std::vector<GradeCase> cases = decode_edge_cases(pa::DType::fp16, 128);
    for (const auto& c : decode_edge_cases(pa::DType::bf16, 128)) cases.push_back(c);
    for (const auto& c : seeded_cases(20241121, 8, kInstances)) cases.push_back(c);
    for (const auto& c : cases) {
        if (c.name == "ctx-1" || c.name == "ctx-1-bf16") continue;  // one token: its mean is the answer
        INFO(c.name);
        const pa::DecodeProblem p = make_grade_problem(c, 20241121);
        const pa::DType t = p.shape.dtype;
        const auto ref = pa::reference::softmax_decode(p);
        const auto zeros = std::vector<double>(ref.size(), 0.0);
        const auto mean_v = pa::reference::decode_with_weights(pa::PagedDecodeView(p), p.scale, Uniform{});
        CHECK_FALSE(pa::compare_output(encode_all(t, zeros), ref, t).pass);
        const pa::CheckResult m = pa::compare_output(encode_all(t, mean_v), ref, t);
        CHECK_FALSE(m.pass);
        CHECK(m.rel_err > 5 * pa::tolerance_for(t).rel);
        CHECK(pa::compare_output(encode_all(t, ref), ref, t).pass);  // the answer itself passes
    }
}

TEST_CASE("large logits: a max missing lane 16 or the last warp lets exp overflow", "[exercise]") {
    // The naive kernel's thread i holds tokens i, i + 128, ...; a wrong block max misses the
    // tokens of lanes 16..31 (or of warp 3). Softmax is shift-invariant, so such a max shows only
    // where the true max is more than ~88 above it (exp overflows in fp32). Count the heads where
    // that happens, for the default seed and two others: each must have many.
    GradeCase c;
    for (const auto& e : decode_edge_cases(pa::DType::fp16, 128))
        if (e.name == "large-logits") c = e;
    REQUIRE(c.name == "large-logits");
    for (uint64_t seed : {20241121ULL, 1ULL, 777ULL}) {
        const pa::DecodeProblem p = make_grade_problem(c, seed);
        const pa::PagedDecodeView v(p);
        int lane16 = 0, last_warp = 0;
        for (int b = 0; b < v.B(); ++b)
            for (int h = 0; h < v.H(); ++h) {
                double all = -INFINITY, no_lane16 = -INFINITY, no_last = -INFINITY;
                for (int t = 0; t < v.ctx(b); ++t) {
                    double dot = 0;
                    for (int d = 0; d < v.D(); ++d) dot += v.q(b, h, d) * v.k(b, t, h / (v.H() / v.Hkv()), d);
                    const double s = dot * p.scale;
                    const int thread = t % 128;
                    all = std::max(all, s);
                    if (thread % 32 < 16) no_lane16 = std::max(no_lane16, s);
                    if (thread / 32 < 3) no_last = std::max(no_last, s);
                }
                lane16 += all - no_lane16 > 89;
                last_warp += all - no_last > 89;
            }
        INFO("seed " << seed << ": heads that overflow without lane 16: " << lane16 << ", without the last warp: " << last_warp);
        CHECK(lane16 >= 8);
        CHECK(last_warp >= 4);
    }
}

TEST_CASE("diagnose: names zeros, a suspect, scaled rows and NaN", "[exercise]") {
    const pa::DType t = pa::DType::fp16;
    const int rows = 4, len = 8;
    std::vector<double> ref(rows * len);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::sin(1.0 + static_cast<double>(i));
    const std::vector<Suspect> suspects = {
        {"the output is all zeros", [&] { return std::vector<double>(ref.size(), 0.0); }},
        {"SUSPECT-B", [&] { auto x = ref; x[0] += 0.5; return x; }}};
    auto diag = [&](const std::vector<double>& o) {
        const auto enc = encode_all(t, o);
        return diagnose(enc, ref, t, pa::compare_output(enc, ref, t), suspects, rows, len);
    };
    CHECK(diag(ref).empty());
    CHECK(diag(std::vector<double>(ref.size(), 0.0)) == "the output is all zeros");
    auto b = ref;
    b[0] += 0.5;
    CHECK(diag(b) == "SUSPECT-B");
    auto scaled = ref;
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < len; ++i) scaled[r * len + i] *= 1.0 + 0.25 * (r + 1);
    CHECK(diag(scaled).find("times a factor") != std::string::npos);
    auto nan = ref;
    nan[3] = NAN;
    CHECK(diag(nan).find("NaN") != std::string::npos);
    auto noise = ref;
    for (size_t i = 0; i < noise.size(); ++i) noise[i] += 0.3 * std::cos(7.0 * static_cast<double>(i));
    CHECK(diag(noise).find("relative error") != std::string::npos);
}

TEST_CASE("speed bands and the geometric-mean ratio", "[exercise]") {
    CHECK(speed_band(1.0) == "full marks");
    CHECK(speed_band(1.2) == "full marks");
    CHECK(speed_band(1.3) == "good");
    CHECK(speed_band(1.9) == "slow");
    CHECK(speed_band(3.0) == "very slow");
    GradeReport r;
    CHECK(r.speed_ratio() == 0);
    r.speed = {{"a", 2.0, 1.0}, {"b", 1.0, 2.0}};
    CHECK(std::fabs(r.speed_ratio() - 1.0) < 1e-12);
}

TEST_CASE("JSON: every field, strings escaped, exit code matching the outcome", "[exercise]") {
    GradeReport r;
    r.program = "lesson01_exercise";
    r.build = "mutant \"quoted\"\\";
    r.exercise = "window";
    r.seed = 123;
    r.gpu = "NVIDIA H100";
    r.outcome = Outcome::wrong;
    r.summary = "RESULT: FAIL\nsecond line\t";
    CaseResult a;
    a.name = "ctx-1";
    a.group = "edge";
    a.window = 7;
    a.pass = true;
    CaseResult b;
    b.name = "mqa";
    b.group = "edge";
    b.message = "the output is all zeros";
    b.rel_err = 1.0;
    CaseResult s;
    s.name = "llama70b-B16-ctx8k";
    s.skipped = true;
    r.cases = {a, b, s};
    const std::string j = to_json(r);
    CHECK(j.find("\"build\": \"mutant \\\"quoted\\\"\\\\\"") != std::string::npos);
    CHECK(j.find("\"summary\": \"RESULT: FAIL\\nsecond line\\t\"") != std::string::npos);
    CHECK(j.find("\"outcome\": \"wrong\"") != std::string::npos);
    CHECK(j.find("\"exit_code\": 1") != std::string::npos);
    CHECK(j.find("\"passed\": 1,\n  \"failed\": 1,\n  \"skipped\": 1") != std::string::npos);
    CHECK(j.find("\"window\": 7") != std::string::npos);
    CHECK(j.find("\"window\": null") != std::string::npos);
    CHECK(j.find("\"speed\": null") != std::string::npos);
    CHECK(j.find('\n') != std::string::npos);
    // no raw control character inside a string
    for (char ch : j) CHECK((ch == '\n' || static_cast<unsigned char>(ch) >= 0x20));
    r.outcome = Outcome::pass;
    r.speed = {{"llama7b-B32-ctx1k", 110.0, 100.0}};
    const std::string k = to_json(r);
    CHECK(k.find("\"exit_code\": 0") != std::string::npos);
    CHECK(k.find("\"ratio\": 1.1") != std::string::npos);
    CHECK(k.find("\"band\": \"full marks\"") != std::string::npos);
    std::string err;
    CHECK_FALSE(write_json("/nonexistent-dir/x.json", r, &err));
    CHECK(err.find("cannot write") != std::string::npos);
}
