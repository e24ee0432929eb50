// The GPU side of a decode lesson's exercise grader (lessons 01-05): check a student's kernel
// on every case, then time it against the lesson's own kernel, with a watchdog for hangs.
//
//   for each case and window (with the case's param): poison the output (NaN) -> launch on a stream -> wait with a
//   deadline -> compare with the reference -> one line per failure (diagnose names it)
//   then, only if all pass: student and lesson kernel timed alternately, L2-cold, the output
//   poisoned before every launch -> the student's last output checked again -> speed ratio
//
// A hang never reaches a blocking call unguarded: waits poll the stream against a deadline,
// and a host thread (the Watchdog) ends the process with exit code 4 and one line if any
// other call blocks past it. Both write the --json result first.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "decode_args.h"
#include "exercise_grader.h"

namespace pa::exercise {

// A host thread that ends the process (exit code 4) when an armed deadline passes.
class Watchdog {
  public:
    // `on_hang` runs once before the exit (writes the --json result); it gets the hang's line.
    Watchdog(double seconds, std::function<void(const std::string& line)> on_hang);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    // From now until disarm(), `what` must finish within seconds() (the thread allows two more,
    // so that wait_stream, which polls, names the hang first). `seconds` > 0 allows that much
    // instead, for this arming only (a first launch, which may load and JIT-compile a module).
    void arm(const std::string& what, double seconds = 0);
    void disarm();
    double seconds() const { return armed_seconds_; }  // the current arming's allowance
    // Prints "HANG <what>: ..." (one line), runs on_hang, exits with 4. Never returns.
    [[noreturn]] void hang(const std::string& what);

  private:
    void run();
    const double seconds_;
    double armed_seconds_;  // seconds_, or the current arming's own allowance
    std::function<void(const std::string&)> on_hang_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool armed_ = false, stop_ = false;
    std::string what_;
    std::chrono::steady_clock::time_point deadline_;
    std::thread thread_;  // last: started once the members above exist
};

// Waits for `stream` by polling; past the watchdog's seconds() the watchdog's hang(`what`).
// A kernel error (illegal address, ...) throws CudaError.
void wait_stream(cudaStream_t stream, Watchdog& watchdog, const std::string& what);

// A grade's report: printed and written as --json at the end, or by the watchdog on a hang.
struct GradeLog {
    std::string program, json;  // json: --json FILE, or empty
    GradeReport report;
    std::mutex mu;  // the watchdog's thread reads the report to write --json

    GradeLog(const std::string& program, const std::string& build, const std::string& exercise, uint64_t seed,
             const std::string& json);
    void add(const CaseResult& c);                        // one more case
    int finish(Outcome o, const std::string& summary);    // prints the summary, writes --json, returns the exit code
    void hang(const std::string& line);                   // the Watchdog's on_hang
  private:
    void write_json();  // with mu held
};

// " W=<w>" for a window, "" for full attention.
std::string window_label(int w);

// The speed comparison of a graded kernel (who 0) with the lesson's (who 1): one untimed first
// launch of each (it may load the kernel's module and, on a GPU newer than the build's
// architectures, JIT-compile its PTX: seconds, not a hang), then `rounds` rounds of `iters` timed
// launches of each, the two taking turns at going first. prepare(who) poisons the output of the
// next launch and picks its inputs (L2-cold: a different copy each time); launch(who) enqueues
// only the kernel, which alone sits between the timing events. Returns the medians (us).
SpeedShape time_alternately(const std::string& exercise, const std::string& shape, cudaStream_t stream, Watchdog& wd,
                            int rounds, int iters, const std::function<void(int who)>& prepare,
                            const std::function<void(int who)>& launch);

// A graded kernel's launcher: `window` is the sliding window (kFullWindow: full attention),
// `param` the case's GradeCase::param.
using GradedLaunch = std::function<void(const PagedDecodeArgs&, int window, int param, cudaStream_t)>;

struct GraderSpec {
    std::string program;    // "lesson01_exercise"
    std::string build;      // which graded file this executable holds: "student", "mutant fill_zeros", ...
    std::string exercise;   // "fill" or "window"
    std::vector<GradeCase> cases;
    // The student's kernel: why it cannot run a shape on this GPU ("" if it can), and its launch.
    std::function<std::string(const DecodeShape&)> why_not;
    GradedLaunch student;
    // The lesson's own kernel on the same shapes, the speed baseline (full attention).
    std::string lesson_variant;  // its name in the lesson ("naive")
    std::function<std::string(const DecodeShape&)> lesson_why_not;
    std::function<void(const PagedDecodeArgs&, cudaStream_t)> lesson;
    std::function<std::vector<double>(const DecodeProblem&, int window, int param)> reference;
    // Known wrong answers for a failed (problem, window, param), tried in order (see diagnose).
    std::function<std::vector<Suspect>(const DecodeProblem&, int window, int param)> suspects;
    // Optional, for a kernel with a second output or scratch of its own (lesson 03: the split
    // workspace, the log-sum-exp): poison_extra fills those buffers with NaN before every launch
    // of the student's kernel (checks and timing, outside the timed events); check_extra, after
    // each check whose `out` passed and after the re-check, returns "" or one failure line.
    // Unset: only `out` is poisoned and checked.
    std::function<void(const PagedDecodeArgs&, cudaStream_t)> poison_extra;
    std::function<std::string(const DecodeProblem&, int window, int param)> check_extra;
    std::vector<DecodeShape> timing_shapes;
    int timing_window = kFullWindow;  // the window the student's kernel is timed with
    int timing_param = 0;             // and its param
    uint64_t seed = 0;
    std::string json;        // --json FILE, or empty
    double timeout_s = 10;   // the watchdog's deadline for one launch and its wait
    int rounds = 6;          // timing: rounds of (student, lesson) or (lesson, student), alternating
    int iters = 10;          // timed launches of each kernel per round
};

// Runs the grade and returns its exit code (0 pass, 1 wrong, 3 no GPU, 4 hang; a hang exits
// from inside). Prints one line per failure and a last line starting "RESULT".
int grade(const GraderSpec& spec);

}  // namespace pa::exercise
