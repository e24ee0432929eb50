// One grader executable of lesson 07's exercise: the harness (compiled once) plus the graded
// files, chosen by compile definitions (lessons/07_kv_staging/CMakeLists.txt):
//   PA_EXERCISE_FILL   the fill-in's graded file: student.h, a mutant, or lesson_fill.h
//   PA_EXERCISE_TP     the extension's graded file: tp.h, a mutant, or solution/tp.h
//   PA_EXERCISE_BUILD  the build's name, printed and written to --json
// An executable without one of them grades only the other exercise. Plain C++: no GPU needed.
#include "harness.h"

#ifdef PA_EXERCISE_FILL
#include PA_EXERCISE_FILL
#endif
#ifdef PA_EXERCISE_TP
#include PA_EXERCISE_TP
#endif

int main(int argc, char** argv) {
    lesson07_exercise::Graded g;
    g.build = PA_EXERCISE_BUILD;
#ifdef PA_EXERCISE_FILL
    g.fill.rank_heads = [](int tp, int rank, int kv_heads) { return ex_fill::rank_heads(tp, rank, kv_heads); };
    g.fill.head_slice = [](const lesson07::TpConfig& tp, int src, int dst) { return ex_fill::head_slice(tp, src, dst); };
    g.fill.may_write = [](const lesson07::RingAllocation& a, const lesson07::Watermark& wm) {
        return ex_fill::prefill_may_write(a, wm);
    };
#endif
#ifdef PA_EXERCISE_TP
    g.tp = [](const lesson07::TpConfig& tp, int layers, int tokens) { return ex_tp::replicated_plan(tp, layers, tokens); };
#endif
    return lesson07_exercise::run(argc, argv, g);
}
