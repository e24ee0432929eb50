#include "exercise_grader.cuh"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "decode_driver.cuh"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "table.h"

namespace pa::exercise {

Watchdog::Watchdog(double seconds, std::function<void(const std::string&)> on_hang)
    : seconds_(seconds), armed_seconds_(seconds), on_hang_(std::move(on_hang)), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void Watchdog::arm(const std::string& what, double seconds) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        what_ = what;
        armed_seconds_ = seconds > 0 ? seconds : seconds_;
        deadline_ = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>((armed_seconds_ + 2.0) * 1000.0));
        armed_ = true;
    }
    cv_.notify_all();
}

void Watchdog::disarm() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        armed_ = false;
    }
    cv_.notify_all();
}

void Watchdog::run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
        if (!armed_) {
            cv_.wait(lk);
            continue;
        }
        cv_.wait_until(lk, deadline_);
        if (!stop_ && armed_ && std::chrono::steady_clock::now() >= deadline_) {
            const std::string what = what_;
            lk.unlock();
            hang(what);  // a CUDA call of the main thread has blocked past the deadline
        }
    }
}

void Watchdog::hang(const std::string& what) {
    static std::atomic<bool> once{false};
    if (once.exchange(true))
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the other thread is exiting
    const std::string line =
        strf("HANG %s: no result after %.0f s (a spin-wait that never ends, or a barrier or full-mask shuffle that "
             "some threads never reach)",
             what.c_str(), armed_seconds_);
    std::fflush(stdout);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (on_hang_) on_hang_(line);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code(Outcome::hang));  // no waiting for the GPU: it is still running the kernel
}

void wait_stream(cudaStream_t stream, Watchdog& watchdog, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<long long>(watchdog.seconds() * 1000.0));
    for (;;) {
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        if (std::chrono::steady_clock::now() >= deadline) watchdog.hang(what);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

std::string window_label(int w) { return w >= kFullWindow ? std::string() : strf(" W=%d", w); }

GradeLog::GradeLog(const std::string& prog, const std::string& build, const std::string& exercise, uint64_t seed,
                   const std::string& json_file)
    : program(prog), json(json_file) {
    report.program = prog;
    report.build = build;
    report.exercise = exercise;
    report.seed = seed;
}

void GradeLog::write_json() {
    if (json.empty()) return;
    std::string err;
    if (!pa::exercise::write_json(json, report, &err)) std::fprintf(stderr, "error: %s: %s\n", program.c_str(), err.c_str());
}

void GradeLog::add(const CaseResult& c) {
    std::lock_guard<std::mutex> lk(mu);
    report.cases.push_back(c);
}

int GradeLog::finish(Outcome o, const std::string& summary) {
    std::lock_guard<std::mutex> lk(mu);
    report.outcome = o;
    report.summary = summary;
    std::printf("%s\n", summary.c_str());
    std::fflush(stdout);
    write_json();
    return exit_code(o);
}

void GradeLog::hang(const std::string& line) {
    std::lock_guard<std::mutex> lk(mu);
    report.outcome = Outcome::hang;
    report.summary = line;
    write_json();
}

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

SpeedShape time_alternately(const std::string& exercise, const std::string& shape, cudaStream_t stream, Watchdog& wd,
                            int rounds, int iters, const std::function<void(int who)>& prepare,
                            const std::function<void(int who)>& launch) {
    auto name = [&](const char* what, int who) {
        return strf("%s %s %s (%s)", exercise.c_str(), what, shape.c_str(), who == 0 ? "student" : "lesson");
    };
    for (int who = 0; who < 2; ++who) {
        const std::string what = name("first launch on", who);
        wd.arm(what, std::max(wd.seconds(), 300.0));
        prepare(who);
        launch(who);
        wait_stream(stream, wd, what);
        wd.disarm();
    }
    std::vector<double> us[2];  // [0] student, [1] lesson
    std::vector<cudaEvent_t> ev(2 * iters);
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    for (int round = 0; round < rounds; ++round) {
        for (int k = 0; k < 2; ++k) {
            const int who = (round % 2) ^ k;  // student first in even rounds, lesson first in odd ones
            const std::string what = name("speed", who);
            wd.arm(what);
            for (int i = 0; i < iters; ++i) {
                prepare(who);
                CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
                launch(who);
                CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
            }
            wait_stream(stream, wd, what);
            wd.disarm();
            for (int i = 0; i < iters; ++i) {
                float ms = 0;
                CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
                us[who].push_back(ms * 1000.0);
            }
        }
    }
    for (auto& e : ev) CUDA_CHECK(cudaEventDestroy(e));
    SpeedShape sp;
    sp.shape = shape;
    sp.student_us = median(us[0]);
    sp.lesson_us = median(us[1]);
    return sp;
}

namespace {

// Poison, launch, wait (bounded), download.
std::vector<uint16_t> run_once(const GraderSpec& spec, DeviceDecodeProblem& dev, int window, int param,
                               cudaStream_t stream, Watchdog& wd, const std::string& what) {
    PagedDecodeArgs a = dev.args(0);
    const size_t n = static_cast<size_t>(a.B) * a.H * a.D;
    wd.arm(what);
    CUDA_CHECK(cudaMemsetAsync(a.out, 0xff, n * sizeof(uint16_t), stream));  // NaN in fp16 and bf16
    if (spec.poison_extra) spec.poison_extra(a, stream);
    spec.student(a, window, param, stream);
    wait_stream(stream, wd, what);
    std::vector<uint16_t> out(n);
    CUDA_CHECK(cudaMemcpy(out.data(), a.out, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    wd.disarm();
    return out;
}

}  // namespace

int grade(const GraderSpec& spec) {
    GradeLog g(spec.program, spec.build, spec.exercise, spec.seed, spec.json);
    std::string why;
    if (!gpu_available(&why)) {
        return g.finish(Outcome::no_gpu, strf("RESULT: NO GPU: %s: no usable CUDA GPU (%s); nothing graded",
                                             spec.program.c_str(), why.c_str()));
    }
    const DeviceInfo info = require_gpu(spec.program);  // also validates PA_SMEM_CAP_KIB (exit 2)
    g.report.gpu = info.name;
    Watchdog wd(spec.timeout_s, [&](const std::string& line) { g.hang(line); });
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    std::printf("%s --grade --exercise %s: build '%s', seed %llu, on %s\n", spec.program.c_str(), spec.exercise.c_str(),
                spec.build.c_str(), static_cast<unsigned long long>(spec.seed), info.summary().c_str());
    std::printf("correctness: %zu cases (catalogue, seeded, edge); outputs poisoned with NaN before every launch\n",
                spec.cases.size());
    int checks = 0, failures = 0, skipped = 0;
    try {
        for (const GradeCase& c : spec.cases) {
            const std::string why_not = spec.why_not(c.shape);
            if (!why_not.empty()) {
                std::printf("  skip %-28s %s\n", c.name.c_str(), why_not.c_str());
                CaseResult cr;
                cr.name = c.name;
                cr.group = c.group;
                cr.skipped = true;
                cr.message = why_not;
                g.add(cr);
                ++skipped;
                continue;
            }
            const DecodeProblem p = make_grade_problem(c, spec.seed);
            DeviceDecodeProblem dev(p);
            double worst = 0;
            int case_failures = 0;
            for (int w : c.windows) {
                const std::string label = spec.exercise + " " + c.name + window_label(w);
                const std::vector<double> ref = spec.reference(p, w, c.param);
                const std::vector<uint16_t> out = run_once(spec, dev, w, c.param, stream, wd, label);
                const CheckResult r = compare_output(out, ref, p.shape.dtype);
                CaseResult cr;
                cr.name = c.name;
                cr.group = c.group;
                cr.window = w;
                cr.pass = r.pass;
                cr.rel_err = r.rel_err;
                cr.max_abs_err = r.max_abs_err;
                ++checks;
                const std::string extra = r.pass && spec.check_extra ? spec.check_extra(p, w, c.param) : std::string();
                if (!r.pass) {
                    ++failures;
                    ++case_failures;
                    const std::vector<Suspect> suspects =
                        spec.suspects ? spec.suspects(p, w, c.param) : std::vector<Suspect>{};
                    cr.message = diagnose(out, ref, p.shape.dtype, r, suspects, p.shape.B * p.shape.H, p.shape.D);
                    std::printf("  FAIL %s: %s [this case: %s]\n", label.c_str(), cr.message.c_str(), c.teaches.c_str());
                } else if (!extra.empty()) {
                    ++failures;
                    ++case_failures;
                    cr.pass = false;
                    cr.message = extra;
                    std::printf("  FAIL %s: %s [this case: %s]\n", label.c_str(), cr.message.c_str(), c.teaches.c_str());
                } else {
                    worst = std::max(worst, r.rel_err);
                }
                g.add(cr);
            }
            if (case_failures == 0)
                std::printf("  ok   %-28s %zu check%s, max rel err %.1e\n", c.name.c_str(), c.windows.size(),
                            c.windows.size() == 1 ? "" : "s", worst);
        }
    } catch (const CudaError& e) {
        ++failures;
        CaseResult cr;
        cr.name = "crash";
        cr.group = "error";
        cr.message = strf("CUDA error: %s (an out-of-bounds access?); grading stopped", e.what());
        std::printf("  FAIL %s: %s\n", spec.exercise.c_str(), cr.message.c_str());
        {
            g.add(cr);
        }
        return g.finish(Outcome::wrong, strf("RESULT: FAIL: the %s kernel crashed after %d checks", spec.exercise.c_str(), checks));
    }
    if (checks == 0)
        return g.finish(Outcome::bad_input, strf("RESULT: NOT GRADED: no case can run on %s (%d skipped)", info.name.c_str(), skipped));
    if (failures > 0) {
        std::printf("speed: not measured (correctness comes first)\n");
        return g.finish(Outcome::wrong, strf("RESULT: FAIL: %d of %d checks of the %s exercise failed", failures, checks,
                                             spec.exercise.c_str()));
    }

    // Speed: alternately, in the same run, L2-cold, both kernels' outputs poisoned before every launch.
    std::printf("speed: the %s kernel against the lesson's own kernel (%s), timed alternately, L2-cold%s\n",
                spec.exercise.c_str(), spec.lesson_variant.c_str(),
                spec.timing_window >= kFullWindow ? "" : strf(", window %d", spec.timing_window).c_str());
    bool recheck = true;
    try {
        for (const DecodeShape& s : spec.timing_shapes) {
            std::string no = spec.why_not(s);
            if (no.empty()) no = spec.lesson_why_not(s);
            if (!no.empty()) {
                std::printf("  skip %-28s %s\n", s.name.c_str(), no.c_str());
                continue;
            }
            GradeCase tc;
            tc.name = s.name;
            tc.shape = s;
            const DecodeProblem p = make_grade_problem(tc, spec.seed);
            DeviceDecodeProblem dev(p, l2_cold_copies(p, info));
            const size_t n = static_cast<size_t>(s.B) * s.H * s.D;
            DeviceBuffer<uint16_t> student_out(n);
            int copy = 0;
            PagedDecodeArgs a;
            const auto prepare = [&](int who) {
                a = dev.args(copy++ % dev.copies());
                if (who == 0) a.out = student_out.get();
                CUDA_CHECK(cudaMemsetAsync(a.out, 0xff, n * sizeof(uint16_t), stream));
                if (who == 0 && spec.poison_extra) spec.poison_extra(a, stream);
            };
            const auto launch = [&](int who) {
                if (who == 0) spec.student(a, spec.timing_window, spec.timing_param, stream);
                else spec.lesson(a, stream);
            };
            SpeedShape sp = time_alternately(spec.exercise, s.name, stream, wd, spec.rounds, spec.iters, prepare, launch);
            // The student's last timed launch, checked again (a race or a stale-buffer answer shows here).
            wd.arm(spec.exercise + " re-check " + s.name);
            std::vector<uint16_t> out = student_out.download();
            wd.disarm();
            CheckResult r = compare_output(out, spec.reference(p, spec.timing_window, spec.timing_param), s.dtype);
            if (r.pass && spec.check_extra) {
                const std::string extra = spec.check_extra(p, spec.timing_window, spec.timing_param);
                if (!extra.empty()) {
                    r.pass = false;
                    r.message = extra;
                }
            }
            std::printf("  %-28s student %9.2f us   lesson %9.2f us   ratio %.3f%s\n", s.name.c_str(), sp.student_us,
                        sp.lesson_us, sp.ratio(), r.pass ? "" : "   re-check FAILED");
            std::lock_guard<std::mutex> lk(g.mu);
            g.report.speed.push_back(sp);
            if (!r.pass) {
                recheck = false;
                g.report.recheck_pass = false;
                CaseResult cr;
                cr.name = "re-check " + s.name;
                cr.group = "recheck";
                cr.window = spec.timing_window;
                cr.rel_err = r.rel_err;
                cr.max_abs_err = r.max_abs_err;
                cr.message = r.message + " (after the timing loop)";
                g.report.cases.push_back(cr);
                std::printf("  FAIL %s re-check %s: %s\n", spec.exercise.c_str(), s.name.c_str(), cr.message.c_str());
            }
        }
    } catch (const CudaError& e) {
        return g.finish(Outcome::wrong, strf("RESULT: FAIL: CUDA error while timing: %s", e.what()));
    }
    if (!recheck)
        return g.finish(Outcome::wrong, "RESULT: FAIL: the output after the timing loop is wrong (a race?)");
    const double ratio = g.report.speed_ratio();
    if (ratio <= 0)
        return g.finish(Outcome::pass, strf("RESULT: PASS: %d/%d checks; speed not measured (no timing shape runs here)",
                                            checks, checks));
    return g.finish(Outcome::pass, strf("RESULT: PASS: %d/%d checks; speed ratio %.3f of the lesson's kernel (%s)", checks,
                                        checks, ratio, speed_band(ratio).c_str()));
}

}  // namespace pa::exercise
