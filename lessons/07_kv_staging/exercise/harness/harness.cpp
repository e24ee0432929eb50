#include "harness.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "exercise_grader.h"
#include "flags.h"

namespace lesson07_exercise {

namespace {

using pa::exercise::CaseResult;
using pa::exercise::GradeReport;
using pa::exercise::Outcome;

const char* kProgram = "lesson07_exercise";
const char* kUsage =
    "lesson07_exercise --grade [--exercise fill|tp] [--seed S] [--json FILE] [--timeout S]\n"
    "  grades lesson 07's exercises on the CPU (no GPU needed): fill (student.h: the head slices and\n"
    "  the ring's watermark check) and tp (tp.h: decode TP above the KV heads)";

struct Grading {
    GradeReport report;
    std::string json;
    std::mutex mu;

    void write_json_locked() {
        if (json.empty()) return;
        std::string err;
        if (!pa::exercise::write_json(json, report, &err)) std::fprintf(stderr, "%s: %s\n", kProgram, err.c_str());
    }
    int finish(Outcome o, const std::string& summary) {
        std::lock_guard<std::mutex> lk(mu);
        report.outcome = o;
        report.summary = summary;
        std::printf("%s\n", summary.c_str());
        std::fflush(stdout);
        write_json_locked();
        return pa::exercise::exit_code(o);
    }
};

using Check = std::function<std::string(const HostCase&, int*)>;

// Runs every case, one line each; returns the number of failed cases.
int grade_cases(Grading& g, const std::vector<HostCase>& cases, const Check& check, int* checks) {
    int failed = 0;
    for (const HostCase& c : cases) {
        int n = 0;
        const std::string m = check(c, &n);
        *checks += n;
        CaseResult r;
        r.name = c.name;
        r.group = c.group;
        r.pass = m.empty();
        r.message = m;
        if (m.empty()) {
            std::printf("  ok   %-34s %d check%s\n", c.name.c_str(), n, n == 1 ? "" : "s");
        } else {
            ++failed;
            std::printf("  FAIL %s: %s [this case: %s]\n", c.name.c_str(), m.c_str(), c.teaches.c_str());
        }
        std::fflush(stdout);
        std::lock_guard<std::mutex> lk(g.mu);
        g.report.cases.push_back(r);
    }
    return failed;
}

int grade(Grading& g, const Graded& gr, const pa::exercise::GradeFlags& f) {
    std::printf("%s --grade --exercise %s: build '%s', seed %llu, on the CPU (no GPU needed)\n", kProgram, f.exercise.c_str(),
                gr.build.c_str(), static_cast<unsigned long long>(f.seed));
    int checks = 0, failed = 0;
    size_t cases = 0;
    if (f.exercise == "fill") {
        const std::vector<HostCase> plan = plan_cases(f.seed), ring = ring_cases(f.seed);
        cases = plan.size() + ring.size();
        std::printf("TODO(1) rank_heads and head_slice: %zu TP pairs (the lesson's, every pair up to TP 16, seeded), every rank\n",
                    plan.size());
        failed += grade_cases(g, plan, [&](const HostCase& c, int* n) { return check_plan_case(c, gr.fill, n); }, &checks);
        std::printf("TODO(2) prefill_may_write: %zu ring traces of the lesson's ring (scripted, seeded) and a grid\n", ring.size());
        failed += grade_cases(g, ring, [&](const HostCase& c, int* n) { return check_ring_case(c, gr.fill, n); }, &checks);
    } else {
        const std::vector<HostCase> rep = replication_cases(f.seed);
        cases = rep.size();
        std::printf("replicated_plan: %zu hand-offs with decode TP above the KV heads (catalogue, edge, seeded), against "
                    "pa::reference::replicated_handoff\n",
                    rep.size());
        failed += grade_cases(g, rep, [&](const HostCase& c, int* n) { return check_replication_case(c, gr.tp, n); }, &checks);
    }
    std::printf("speed: not measured (host code; the plan and the check run once per request)\n");
    if (failed > 0)
        return g.finish(Outcome::wrong, pa::strf("RESULT: FAIL: %d of %zu cases of the %s exercise failed", failed, cases,
                                                 f.exercise.c_str()));
    return g.finish(Outcome::pass, pa::strf("RESULT: PASS: %zu/%zu cases, %d checks; speed not measured (host code)", cases,
                                            cases, checks));
}

}  // namespace

int run(int argc, char** argv, const Graded& gr) {
    std::vector<std::string> exercises;
    if (gr.fill.rank_heads) exercises.push_back("fill");
    if (gr.tp) exercises.push_back("tp");
    // A build without one of the exercises (a mutant) still parses the other's name, to refuse it by name.
    std::vector<std::string> names = {"fill", "tp"};
    const pa::exercise::GradeFlags f = pa::exercise::parse_grade_flags(argc, argv, kProgram, kUsage, names);
    if (std::find(exercises.begin(), exercises.end(), f.exercise) == exercises.end())
        pa::exit_bad_input(kProgram, "this build ('" + gr.build + "') has no " + f.exercise + " exercise");

    Grading g;
    g.json = f.json;
    g.report.program = kProgram;
    g.report.build = gr.build;
    g.report.exercise = f.exercise;
    g.report.seed = f.seed;
    g.report.gpu = "none (graded on the CPU)";

    // The student's code runs on a worker thread; a loop that never ends is named and the
    // process exits 4 without waiting for it.
    std::mutex done_mu;
    std::condition_variable done_cv;
    bool done = false;
    int rc = 1;
    std::thread worker([&] {
        int r = 1;
        try {
            r = grade(g, gr, f);
        } catch (const std::exception& e) {
            r = g.finish(Outcome::wrong, std::string("RESULT: FAIL: the graded code threw outside a check: ") + e.what());
        }
        std::lock_guard<std::mutex> lk(done_mu);
        rc = r;
        done = true;
        done_cv.notify_all();
    });
    std::unique_lock<std::mutex> lk(done_mu);
    if (!done_cv.wait_for(lk, std::chrono::duration<double>(f.timeout_s), [&] { return done; })) {
        {
            std::lock_guard<std::mutex> rl(g.mu);
            g.report.outcome = Outcome::hang;
            g.report.summary = pa::strf("RESULT: HANG: the %s exercise did not finish within %.0f s (a loop that never ends?)",
                                        f.exercise.c_str(), f.timeout_s);
            std::printf("%s\n", g.report.summary.c_str());
            std::fflush(stdout);
            g.write_json_locked();
        }
        std::_Exit(pa::exercise::exit_code(Outcome::hang));
    }
    lk.unlock();
    worker.join();
    return rc;
}

}  // namespace lesson07_exercise
