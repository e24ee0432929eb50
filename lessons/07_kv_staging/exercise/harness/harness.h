// Lesson 07's exercise grader, the read-only part: flags, the grading loop, the watchdog and
// the JSON. Compiled once (lesson07_exercise_harness, plain C++: both exercises are host code
// and are graded without a GPU); each grader executable adds only its graded files
// (graded_main.cpp). The checks themselves are in grading.h.
#pragma once

#include <string>

#include "grading.h"

namespace lesson07_exercise {

// What one grader executable holds: the graded files' functions (unset: not in this build).
struct Graded {
    std::string build;  // "student", "lesson + solution", "mutant fill_rank_mod_heads", ...
    FillFunctions fill;
    TpFunction tp;
};

// main() of every grader executable: exit 0 pass, 1 wrong, 2 bad input, 4 hang.
int run(int argc, char** argv, const Graded& g);

}  // namespace lesson07_exercise
