// The command-line flags every lesson understands, parsed once here.
//
//   --check | --bench            only the correctness check / only the measurement
//   --shape NAME                 a catalogue shape (repeatable)
//   --B --H --Hkv --ctx --D --block-size   an explicit shape (--ctx takes one value,
//                                or B comma-separated values for mixed lengths)
//   --dtype fp16|bf16  --csv FILE  --iters N  --seed N  --variant NAME  --help
// A lesson registers flags of its own (lesson 02's --timeline, lesson 07's --tokens) as
// LessonFlags; every other program refuses them as unknown.
//
// Invalid input is reported as one line naming the problem; the program exits with 2.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "shapes.h"

namespace pa {

constexpr int kExitBadInput = 2;  // a flag, shape or value the program refuses
constexpr int kExitNoGpu = 3;     // no usable CUDA GPU (or one this lesson cannot use)

struct FlagError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A flag one lesson adds: `--name` alone (a switch) or `--name VALUE`.
struct LessonFlag {
    std::string name;          // with the dashes: "--timeline"
    bool takes_value = false;
    std::string help;          // one line for --help: "--tokens N   tokens per request"
    // Flags of the shared set it cannot be combined with (e.g. "--check").
    std::vector<std::string> excludes;
};

struct Flags {
    bool check_only = false;
    bool bench_only = false;
    bool help = false;
    std::vector<std::string> shapes;  // --shape, in order given
    std::optional<int> B, H, Hkv, D, block_size;
    std::vector<int> ctx;             // --ctx: empty, one value, or B values
    std::optional<DType> dtype;
    std::string csv;
    int iters = 100;
    unsigned long long seed = 20241121ULL;
    std::string variant;              // --variant: lesson-specific, validated by the lesson
    std::map<std::string, std::string> lesson;  // lesson flags given: name -> value ("" for a switch)

    bool explicit_shape() const { return B || H || Hkv || D || block_size || !ctx.empty(); }
    bool has(const std::string& lesson_flag) const { return lesson.count(lesson_flag) > 0; }
    // The value of a lesson flag as an integer in [lo, hi], or `fallback` when it was not
    // given. Throws FlagError.
    long long lesson_int(const std::string& lesson_flag, long long lo, long long hi, long long fallback) const;
    // The same as a finite real number in [lo, hi] ("1.5", "2e-3"). Throws FlagError.
    double lesson_real(const std::string& lesson_flag, double lo, double hi, double fallback) const;
    // The same as a comma-separated list of integers, each in [lo, hi]. Throws FlagError.
    std::vector<int> lesson_int_list(const std::string& lesson_flag, long long lo, long long hi,
                                     const std::vector<int>& fallback) const;
};

// The value parsers behind the flags, for a lesson that reads a value of its own. Each
// throws FlagError naming `flag` and the text it refused.
long long parse_integer(const std::string& flag, const std::string& text, long long lo, long long hi);
double parse_real(const std::string& flag, const std::string& text, double lo, double hi);
// "5" or "5,6,7": no empty item, no trailing comma.
std::vector<int> parse_int_list(const std::string& flag, const std::string& text, long long lo, long long hi);

// The one line every program prints for input it refuses: "error: <program>: <message>".
std::string bad_input_line(const std::string& program, const std::string& message);
// Prints bad_input_line to stderr and exits with kExitBadInput.
[[noreturn]] void exit_bad_input(const std::string& program, const std::string& message);

// Throws FlagError with a one-line message. --shape names are checked by select_shapes
// (decode lessons) or by the lesson that has shapes of its own.
Flags parse_flags(int argc, const char* const* argv, const std::vector<LessonFlag>& lesson_flags = {});

// The shapes the flags select: the --shape list, the explicit shape, or `defaults`
// when neither is given; --dtype overrides each shape's dtype. Throws FlagError (an
// unknown shape name among them).
std::vector<DecodeShape> select_shapes(const Flags& f, const std::vector<DecodeShape>& defaults);

// Checks what every decode lesson needs of a shape (H % Hkv, D, page size, ctx);
// throws FlagError naming the shape and the problem.
void validate_decode_shape(const DecodeShape& s);

// Parses, or prints `error: <message>` (and the usage hint) to stderr and exits with 2.
// Prints `usage` (and one line per lesson flag) and exits with 0 on --help.
Flags parse_flags_or_exit(int argc, const char* const* argv, const std::string& usage,
                          const std::vector<LessonFlag>& lesson_flags = {});

// The usage text shared by all decode lessons; `extra` adds lesson-specific lines.
std::string decode_usage(const std::string& program, const std::string& extra = "");

// The first line of every usage text, for lessons with their own shapes (lesson 07).
std::string common_usage_line(const std::string& program);

}  // namespace pa
