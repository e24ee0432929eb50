// The command-line flags every lesson understands, parsed once here.
//
//   --check | --bench            only the correctness check / only the measurement
//   --shape NAME                 a catalogue shape (repeatable)
//   --B --H --Hkv --ctx --D --block-size   an explicit shape (--ctx takes one value,
//                                or B comma-separated values for mixed lengths)
//   --dtype fp16|bf16  --csv FILE  --iters N  --seed N  --variant NAME  --help
//   --timeline                   where the lesson's main kernel spends its time (lessons
//                                that have one; the others refuse it)
//
// Invalid input is reported as one line naming the problem; the program exits with 2.
#pragma once

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
    bool timeline = false;            // --timeline: lesson-specific, refused by lessons without one

    bool explicit_shape() const { return B || H || Hkv || D || block_size || !ctx.empty(); }
};

// Throws FlagError with a one-line message.
Flags parse_flags(int argc, const char* const* argv);

// The shapes the flags select: the --shape list, the explicit shape, or `defaults`
// when neither is given; --dtype overrides each shape's dtype. Throws FlagError.
std::vector<DecodeShape> select_shapes(const Flags& f, const std::vector<DecodeShape>& defaults);

// Checks what every decode lesson needs of a shape (H % Hkv, D, page size, ctx);
// throws FlagError naming the shape and the problem.
void validate_decode_shape(const DecodeShape& s);

// Parses, or prints `error: <message>` (and the usage hint) to stderr and exits with 2.
// Prints `usage` and exits with 0 on --help.
Flags parse_flags_or_exit(int argc, const char* const* argv, const std::string& usage);

// The usage text shared by all decode lessons; `extra` adds lesson-specific lines.
std::string decode_usage(const std::string& program, const std::string& extra = "");

}  // namespace pa
