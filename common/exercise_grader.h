// The host side of every lesson's exercise grader (lessons/NN_name/exercise/): what to check,
// how to name a wrong answer, how to score speed, and what to write for a class-grading script.
// Plain C++ (no CUDA), so the CPU tests prove each part without a GPU; exercise_grader.cuh
// runs it on the GPU.
//
//   cases: the catalogue shapes, shapes drawn from a seed (a teacher's secret seed gives shapes
//          no student saw) and named edge cases -> make_grade_problem (inputs scaled so that an
//          all-zeros or plain-mean answer fails) -> compare_output -> diagnose (one line)
//   speed: the student's kernel over the lesson's own step, timed alternately -> speed_band
//   result: Outcome -> exit_code, and to_json for --json
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "paged_cache.h"
#include "shapes.h"

namespace pa::exercise {

// The grader's exit codes. 2 and 3 are every program's (flags.h); 1 and 4 are the grader's.
enum class Outcome { pass, wrong, bad_input, no_gpu, hang };
int exit_code(Outcome o);           // 0, 1, 2, 3, 4
const char* outcome_name(Outcome o);  // "pass", "wrong", "bad_input", "no_gpu", "hang"

// A window at least this long is full attention for every context a grader draws.
constexpr int kFullWindow = 1 << 30;

// One shape the grader checks, and what it is there to catch.
struct GradeCase {
    std::string name;     // printed on each line: "ctx-1", "seed-3", "llama7b-B1-ctx1k"
    std::string group;    // "catalogue", "seeded" or "edge"
    DecodeShape shape;
    // q is multiplied by this after drawing: the logits' standard deviation (about 1 before).
    // 2 makes the softmax far from uniform, so the plain mean of V is far from the answer.
    double q_scale = 2.0;
    std::string teaches;  // why the case exists, printed when it fails
    // Sliding windows to check (kFullWindow: none); an exercise without a window uses {kFullWindow}.
    std::vector<int> windows{kFullWindow};
    // What else every check of the case runs with, defined by the lesson: an index into its own
    // table (lesson 02: the thread-group size and cap; lesson 05: the gate). 0 when unused.
    int param = 0;
    // Optional: changes the drawn problem after q is scaled (lesson 03's case whose every logit
    // is far below zero); unset: the problem as drawn. The reference reads the changed values.
    std::function<void(DecodeProblem&)> adjust;
};

// The (dtype, head size) pairs a graded build instantiates; seeded shapes draw from these.
struct KernelInstance {
    DType dtype;
    int D;
};

// The (dtype, head size) pairs the decode graders instantiate: fp16 at D 64 and 128, bf16 at D 128.
const std::vector<KernelInstance>& decode_instances();

// `count` shapes drawn from `seed`: B 1..max_B, groups 1..8, Hkv 1..8, page sizes 8/16/32,
// each sequence's context log-uniform in 1..max_ctx, (dtype, D) from `instances`. The same
// seed gives the same shapes on any machine; different seeds give different shapes.
std::vector<GradeCase> seeded_cases(uint64_t seed, int count, const std::vector<KernelInstance>& instances,
                                    int max_ctx = 3000, int max_B = 8);

// The named edge cases every decode grader runs, at (dtype, D): ctx 1, a partial last page,
// 2^k +- 1 lengths around a warp and around a CTA of 128 threads, mixed lengths in one batch,
// MQA, many small pages in random order, and large logits (where a wrong max overflows exp).
std::vector<GradeCase> decode_edge_cases(DType dtype, int D);

// The cases a decode grader starts from, in this order: Table A (group "catalogue"), 8 shapes
// drawn from `seed` over decode_instances(), the edge cases at fp16 D 128, and the mixed-lengths
// edge cases again in bf16 and at D 64.
std::vector<GradeCase> standard_decode_cases(uint64_t seed);

// Windows for a case: 1, a few short ones, the shortest and the longest length and one less
// than each, and full.
// Seeded cases add two drawn from `seed`. Sorted, each once.
std::vector<int> window_set(const DecodeShape& s, uint64_t seed);

// make_decode_problem, then q multiplied by c.q_scale and rounded again (the reference reads
// the rounded values), then c.adjust if set. Unused cache slots stay NaN.
DecodeProblem make_grade_problem(const GradeCase& c, uint64_t seed);

// A known wrong answer, for naming a failure: if the output matches `output` (within the
// dtype's tolerance), the failure line says `message`.
// The output is computed only when it is needed (on a failure, in order, until one matches).
struct Suspect {
    std::string message;                          // "the output is the plain mean of V: ..."
    std::function<std::vector<double>()> output;  // [B, H, D], like the reference
};

// One line for a failed check: a matching suspect's message; else, when every output row is
// the answer times a factor, says so (the softmax sum and its numerators disagree); else the
// check's own message. `rows` x `row_len` is the output's shape ([B * H] x D).
std::string diagnose(const std::vector<uint16_t>& out, const std::vector<double>& ref, DType t, const CheckResult& r,
                     const std::vector<Suspect>& suspects, int rows, int row_len);

// The row-by-row factor test of diagnose: true with the median factor when each row of `out`
// is its reference row times some factor (within 10 tolerances) and the factors are not all 1.
bool rows_are_scaled_answer(const std::vector<double>& out, const std::vector<double>& ref, int rows, int row_len,
                            double tol, double* median_factor);

// Speed: the student's time over the lesson's (L2-cold medians), and its band.
std::string speed_band(double ratio);  // "full marks" within 1.2x, "good" 1.5x, "slow" 2x, "very slow" beyond

struct CaseResult {
    std::string name, group;
    int window = kFullWindow;  // the case's window (kFullWindow: none)
    bool pass = false;
    bool skipped = false;       // the shape cannot run on this GPU (message says why)
    double rel_err = 0, max_abs_err = 0;
    std::string message;        // the failure line's diagnosis, or why skipped
};

struct SpeedShape {
    std::string shape;
    double student_us = 0, lesson_us = 0;
    double ratio() const { return lesson_us > 0 ? student_us / lesson_us : 0; }
};

struct GradeReport {
    std::string program, build, exercise;
    uint64_t seed = 0;
    std::string gpu;
    Outcome outcome = Outcome::pass;
    std::string summary;               // the last line printed
    std::vector<CaseResult> cases;
    std::vector<SpeedShape> speed;     // empty when not measured
    bool recheck_pass = true;          // the student's output after the timing loop
    double speed_ratio() const;        // geometric mean of the shapes' ratios, 0 when not measured
};

// The grader's command line, the same for every lesson: --grade (the default), --exercise NAME
// (one of `exercises`, the first by default), --seed S, --json FILE, --timeout S (1..3600,
// default 10), --iters N (at most 20). Anything else (--check, --shape, --variant, ...) or an
// invalid value exits 2 with one line; --help prints `usage` plus the flags and exits 0.
struct GradeFlags {
    std::string exercise;
    uint64_t seed = 0;
    std::string json;
    double timeout_s = 10;
    int iters = 10;
};
GradeFlags parse_grade_flags(int argc, char** argv, const std::string& program, const std::string& usage,
                             const std::vector<std::string>& exercises);

// JSON for a class-grading script: {"program", "build", "exercise", "seed", "gpu", "outcome",
// "exit_code", "summary", "passed", "failed", "skipped", "cases": [...], "speed": {...} or null}.
std::string json_escape(const std::string& s);
std::string to_json(const GradeReport& r);
// Writes to_json(r) to `path`; false (and *err) when it cannot.
bool write_json(const std::string& path, const GradeReport& r, std::string* err);

}  // namespace pa::exercise
