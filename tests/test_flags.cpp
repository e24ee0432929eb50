// The flags every lesson shares (common/flags.h): bad input throws pa::FlagError with a
// message that names the problem; good input parses to the shapes it says.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <functional>
#include <string>
#include <vector>

#include "flags.h"
#include "shapes.h"

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::MessageMatches;

namespace {

std::string joined(const std::vector<std::string>& args) {
    std::string s;
    for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
    return s;
}

// A lesson's own flags, as lesson 02 and lesson 07 register theirs.
const std::vector<pa::LessonFlag> kLessonFlags = {
    {"--timeline", false, "--timeline   where the time goes", {"--check", "--bench", "--variant"}},
    {"--tokens", true, "--tokens N   tokens per request", {}},
};

pa::Flags parse(const std::vector<std::string>& args) {
    std::vector<const char*> argv{"lesson00_test"};
    for (const auto& a : args) argv.push_back(a.c_str());
    return pa::parse_flags(static_cast<int>(argv.size()), argv.data(), kLessonFlags);
}

pa::Flags parse_without_lesson_flags(const std::vector<std::string>& args) {
    std::vector<const char*> argv{"lesson00_test"};
    for (const auto& a : args) argv.push_back(a.c_str());
    return pa::parse_flags(static_cast<int>(argv.size()), argv.data());
}

std::vector<pa::DecodeShape> select(const std::vector<std::string>& args) {
    return pa::select_shapes(parse(args), pa::table_a());
}

struct BadInput {
    std::vector<std::string> args;
    std::string message;  // a piece the error message must contain
};

}  // namespace

TEST_CASE("parse_flags refuses bad input with a message naming the problem", "[cpu][flags]") {
    const BadInput c = GENERATE(values<BadInput>({
        {{"--frobnicate"}, "unknown flag '--frobnicate'"},
        {{"extra-word"}, "unknown flag 'extra-word'"},
        {{"--shape"}, "--shape needs a value"},
        {{"--iters"}, "--iters needs a value"},
        {{"--B", "x"}, "--B expects an integer, got 'x'"},
        {{"--B", "3.5"}, "--B expects an integer, got '3.5'"},
        {{"--iters", "ten"}, "--iters expects an integer"},
        {{"--B", "99999999999999999999"}, "--B expects an integer"},
        {{"--iters", "0"}, "--iters must be in [1, 100000], got 0"},
        {{"--B", "0"}, "--B must be in [1, "},
        {{"--B", "-4"}, "--B must be in [1, "},
        {{"--ctx", "0"}, "--ctx must be in [1, "},
        {{"--seed", "-1"}, "--seed must be in [0, "},
        {{"--ctx", "5,"}, "--ctx expects a comma-separated list"},
        {{"--check", "--bench"}, "--check and --bench exclude each other"},
        {{"--check=yes"}, "--check takes no value"},
        {{"--csv="}, "--csv needs a file name"},
        {{"--shape", "llama7b-B1-ctx1k", "--B", "2"}, "--shape and an explicit shape"},
        {{"--B", "2", "--Hkv", "2", "--ctx", "100"}, "needs --B, --H, --Hkv and --ctx"},
        {{"--B", "2", "--H", "4", "--Hkv", "2"}, "needs --B, --H, --Hkv and --ctx"},
        {{"--D", "64"}, "needs --B, --H, --Hkv and --ctx"},
        {{"--B", "3", "--H", "4", "--Hkv", "2", "--ctx", "5,6"}, "--ctx gives 2 lengths but --B is 3"},
        {{"--dtype", "fp32"}, "--dtype must be fp16 or bf16, got 'fp32'"},
        {{"--dtype", "FP16"}, "--dtype must be fp16 or bf16"},
        {{"--timeline=1"}, "--timeline takes no value"},
        {{"--timeline", "--check"}, "--timeline cannot be combined with --check"},
        {{"--bench", "--timeline"}, "--timeline cannot be combined with --bench"},
        {{"--timeline", "--variant", "auto"}, "--timeline cannot be combined with --variant"},
        {{"--tokens"}, "--tokens needs a value"},
        {{"--tokens="}, "--tokens needs a value"},
    }));
    CAPTURE(joined(c.args));
    CHECK_THROWS_MATCHES(parse(c.args), pa::FlagError, MessageMatches(ContainsSubstring(c.message)));
}

TEST_CASE("select_shapes refuses shapes no decode lesson can run", "[cpu][flags]") {
    const BadInput c = GENERATE(values<BadInput>({
        {{"--B", "1", "--H", "6", "--Hkv", "4", "--ctx", "10"}, "H (6) must be a multiple of Hkv (4)"},
        {{"--B", "1", "--H", "8", "--Hkv", "2", "--ctx", "10", "--D", "96"}, "head size D=96 is not supported"},
        {{"--B", "1", "--H", "8", "--Hkv", "2", "--ctx", "10", "--block-size", "12"}, "page size 12 is not supported"},
        {{"--B", "1", "--H", "8", "--Hkv", "2", "--ctx", "10", "--block-size=64"}, "page size 64 is not supported"},
    }));
    CAPTURE(joined(c.args));
    pa::Flags f;
    REQUIRE_NOTHROW(f = parse(c.args));  // syntactically fine ...
    CHECK_THROWS_MATCHES(pa::select_shapes(f, pa::table_a()), pa::FlagError,  // ... but not a decode shape
                         MessageMatches(ContainsSubstring(c.message)));
}

TEST_CASE("no flags: both phases, the default shapes unchanged", "[cpu][flags]") {
    const pa::Flags f = parse({});
    CHECK(!f.check_only);
    CHECK(!f.bench_only);
    CHECK(!f.help);
    CHECK(!f.explicit_shape());
    CHECK(f.csv.empty());
    CHECK(f.iters == 100);
    const auto shapes = pa::select_shapes(f, pa::table_a());
    REQUIRE(shapes.size() == pa::table_a().size());
    for (size_t i = 0; i < shapes.size(); ++i) {
        CHECK(shapes[i].name == pa::table_a()[i].name);
        CHECK(shapes[i].dtype == pa::DType::fp16);
    }
}

TEST_CASE("repeated --shape keeps the order given", "[cpu][flags]") {
    const auto shapes = select({"--shape", "mqa-B16-ctx4k", "--shape=h8kv4-B64-ctx128"});
    REQUIRE(shapes.size() == 2);
    CHECK(shapes[0].name == "mqa-B16-ctx4k");
    CHECK(shapes[0].H == 32);
    CHECK(shapes[0].Hkv == 1);
    CHECK(shapes[0].dtype == pa::DType::fp16);
    CHECK(shapes[1].name == "h8kv4-B64-ctx128");
    CHECK(shapes[1].B == 64);
    CHECK(shapes[1].dtype == pa::DType::bf16);
}

TEST_CASE("a --dtype flag overrides the dtype of every selected shape", "[cpu][flags]") {
    for (const auto& s : select({"--shape", "llama7b-B32-ctx1k", "--dtype", "bf16"})) CHECK(s.dtype == pa::DType::bf16);
    for (const auto& s : select({"--dtype=bf16"})) CHECK(s.dtype == pa::DType::bf16);  // the defaults too
    for (const auto& s : select({"--shape", "h8kv4-B1-ctx256", "--dtype", "fp16"})) CHECK(s.dtype == pa::DType::fp16);
}

TEST_CASE("an explicit shape: one length for all, or one per sequence", "[cpu][flags]") {
    SECTION("--ctx 5,6,7 with --B 3") {
        const auto shapes = select({"--B", "3", "--H", "8", "--Hkv", "2", "--ctx", "5,6,7"});
        REQUIRE(shapes.size() == 1);
        const pa::DecodeShape& s = shapes[0];
        CHECK(s.B == 3);
        CHECK(s.H == 8);
        CHECK(s.Hkv == 2);
        CHECK(s.ctx == std::vector<int>{5, 6, 7});
        CHECK(s.D == 128);          // default
        CHECK(s.block_size == 16);  // default
        CHECK(s.dtype == pa::DType::fp16);
        CHECK_THAT(s.name, ContainsSubstring("mixed"));
    }
    SECTION("one --ctx for every sequence, every optional flag") {
        const auto shapes = select({"--B=2", "--H=4", "--Hkv=4", "--ctx=1000", "--D=64", "--block-size=32",
                                    "--dtype=bf16"});
        REQUIRE(shapes.size() == 1);
        const pa::DecodeShape& s = shapes[0];
        CHECK(s.ctx == std::vector<int>{1000, 1000});
        CHECK(s.D == 64);
        CHECK(s.block_size == 32);
        CHECK(s.dtype == pa::DType::bf16);
        CHECK(s.name == "custom-B2-H4-Hkv4-ctx1000-D64-bs32");
    }
}

TEST_CASE("the other flags parse in both --flag value and --flag=value forms", "[cpu][flags]") {
    CHECK(parse({"--iters=5"}).iters == 5);
    CHECK(parse({"--iters", "5"}).iters == 5);
    CHECK(parse({"--seed=7"}).seed == 7);
    CHECK(parse({"--csv", "out/a.csv"}).csv == "out/a.csv");
    CHECK(parse({"--csv=b.csv"}).csv == "b.csv");
    CHECK(parse({"--variant", "naive"}).variant == "naive");
    CHECK(parse({"--check"}).check_only);
    CHECK(parse({"--bench"}).bench_only);
    CHECK(parse({"--help"}).help);
    CHECK(parse({"-h"}).help);
    CHECK(parse({"--timeline", "--shape", "llama7b-B8-ctx2k", "--csv", "t.csv"}).has("--timeline"));
    CHECK_FALSE(parse({}).has("--timeline"));
    CHECK(parse({"--tokens", "4096"}).lesson_int("--tokens", 1, 1 << 20, 7) == 4096);
    CHECK(parse({"--tokens=12"}).lesson_int("--tokens", 1, 1 << 20, 7) == 12);
    CHECK(parse({}).lesson_int("--tokens", 1, 1 << 20, 7) == 7);
    CHECK_THROWS_MATCHES(parse({"--tokens", "0"}).lesson_int("--tokens", 1, 100, 7), pa::FlagError,
                         MessageMatches(ContainsSubstring("--tokens must be in [1, 100]")));
    // another lesson's flag is unknown to a program that did not register it
    CHECK_THROWS_MATCHES(parse_without_lesson_flags({"--timeline"}), pa::FlagError,
                         MessageMatches(ContainsSubstring("unknown flag '--timeline'")));
    // shape names are checked where the shapes are selected (a lesson may have its own)
    CHECK_THROWS_MATCHES(select({"--shape", "llama7b-B1-ctx1024"}), pa::FlagError,
                         MessageMatches(ContainsSubstring("unknown shape 'llama7b-B1-ctx1024'")));
    CHECK(parse({"--shape", "llama7b-B1-ctx1k", "--check", "--iters", "3"}).shapes ==
          std::vector<std::string>{"llama7b-B1-ctx1k"});
}

TEST_CASE("the usage text names the program, the exit codes and every catalogue shape", "[cpu][flags]") {
    const std::string u = pa::decode_usage("lesson01_naive_decode", "Variant: naive.\n");
    CHECK_THAT(u, ContainsSubstring("lesson01_naive_decode"));
    CHECK_THAT(u, ContainsSubstring("Variant: naive."));
    CHECK_THAT(u, ContainsSubstring("3 no usable GPU"));
    for (const auto& s : pa::shape_catalogue()) CHECK_THAT(u, ContainsSubstring(s.name));
    CHECK(pa::kExitBadInput == 2);
    CHECK(pa::kExitNoGpu == 3);
}

TEST_CASE("parse_integer, parse_real and parse_int_list read good values", "[cpu][flags]") {
    CHECK(pa::parse_integer("--n", "42", 0, 100) == 42);
    CHECK(pa::parse_integer("--n", "-7", -10, 10) == -7);
    CHECK(pa::parse_integer("--n", "0", 0, 0) == 0);  // both bounds inclusive
    CHECK(pa::parse_real("--x", "1.5", 0, 3) == 1.5);
    CHECK(pa::parse_real("--x", "2e-3", 0, 1) == 2e-3);
    CHECK(pa::parse_real("--x", "-0.25", -1, 1) == -0.25);
    CHECK(pa::parse_real("--x", "3", 0, 3) == 3.0);  // both bounds inclusive
    CHECK(pa::parse_real("--x", "7", 0, 100) == 7.0);
    CHECK(pa::parse_int_list("--l", "5", 0, 10) == std::vector<int>{5});
    CHECK(pa::parse_int_list("--l", "0,17,1000", 0, 1 << 20) == std::vector<int>{0, 17, 1000});
}

TEST_CASE("parse_integer, parse_real and parse_int_list refuse bad values, naming the flag", "[cpu][flags]") {
    using Parse = std::function<void()>;
    struct Bad {
        std::string what;
        Parse parse;
        std::string message;
    };
    const std::vector<Bad> cases = {
        {"empty integer", [] { pa::parse_integer("--n", "", 0, 9); }, "--n needs a value"},
        {"word", [] { pa::parse_integer("--n", "ten", 0, 9); }, "--n expects an integer, got 'ten'"},
        {"trailing junk", [] { pa::parse_integer("--n", "5x", 0, 9); }, "--n expects an integer, got '5x'"},
        {"a real for an integer", [] { pa::parse_integer("--n", "2.5", 0, 9); }, "--n expects an integer"},
        {"overflow", [] { pa::parse_integer("--n", "99999999999999999999", 0, 9); }, "--n expects an integer"},
        {"below", [] { pa::parse_integer("--n", "-1", 0, 9); }, "--n must be in [0, 9], got -1"},
        {"above", [] { pa::parse_integer("--n", "10", 0, 9); }, "--n must be in [0, 9], got 10"},
        {"empty real", [] { pa::parse_real("--x", "", 0, 3); }, "--x needs a value"},
        {"word real", [] { pa::parse_real("--x", "abc", 0, 3); }, "--x expects a number, got 'abc'"},
        {"trailing junk real", [] { pa::parse_real("--x", "1.5s", 0, 3); }, "--x expects a number, got '1.5s'"},
        {"nan", [] { pa::parse_real("--x", "nan", -1e9, 1e9); }, "--x expects a number, got 'nan'"},
        {"inf", [] { pa::parse_real("--x", "inf", -1e9, 1e9); }, "--x expects a number, got 'inf'"},
        {"hex float", [] { pa::parse_real("--x", "0x1p1", 0, 3); }, "--x expects a number, got '0x1p1'"},
        {"out of double range", [] { pa::parse_real("--x", "1e999", 0, 3); }, "--x expects a number, got '1e999'"},
        {"lone dot", [] { pa::parse_real("--x", ".", 0, 3); }, "--x expects a number, got '.'"},
        {"real below", [] { pa::parse_real("--x", "-0.5", 0, 3); }, "--x must be in [0, 3], got -0.5"},
        {"real above", [] { pa::parse_real("--x", "3.5", 0, 3); }, "--x must be in [0, 3], got 3.5"},
        {"empty list", [] { pa::parse_int_list("--l", "", 0, 9); }, "--l expects a comma-separated list"},
        {"trailing comma", [] { pa::parse_int_list("--l", "1,2,", 0, 9); }, "--l expects a comma-separated list"},
        {"leading comma", [] { pa::parse_int_list("--l", ",1", 0, 9); }, "--l has an empty item in ',1'"},
        {"empty item", [] { pa::parse_int_list("--l", "1,,2", 0, 9); }, "--l has an empty item in '1,,2'"},
        {"word item", [] { pa::parse_int_list("--l", "1,two", 0, 9); }, "--l expects an integer, got 'two'"},
        {"item below", [] { pa::parse_int_list("--l", "1,-2", 0, 9); }, "--l must be in [0, 9], got -2"},
        {"item above", [] { pa::parse_int_list("--l", "10,2", 0, 9); }, "--l must be in [0, 9], got 10"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.what);
        CHECK_THROWS_MATCHES(c.parse(), pa::FlagError, MessageMatches(ContainsSubstring(c.message)));
    }
}

TEST_CASE("lesson_real and lesson_int_list: the fallback, the value, a refused value", "[cpu][flags]") {
    CHECK(parse({}).lesson_real("--tokens", 0, 10, 1.5) == 1.5);
    CHECK(parse({"--tokens", "2.75"}).lesson_real("--tokens", 0, 10, 1.5) == 2.75);
    CHECK(parse({"--tokens=0"}).lesson_real("--tokens", 0, 10, 1.5) == 0.0);
    CHECK_THROWS_MATCHES(parse({"--tokens", "x"}).lesson_real("--tokens", 0, 10, 1.5), pa::FlagError,
                         MessageMatches(ContainsSubstring("--tokens expects a number, got 'x'")));
    CHECK_THROWS_MATCHES(parse({"--tokens", "11"}).lesson_real("--tokens", 0, 10, 1.5), pa::FlagError,
                         MessageMatches(ContainsSubstring("--tokens must be in [0, 10], got 11")));

    CHECK(parse({}).lesson_int_list("--tokens", 0, 100, {7}) == std::vector<int>{7});
    CHECK(parse({"--tokens", "3,0,99"}).lesson_int_list("--tokens", 0, 100, {7}) == std::vector<int>{3, 0, 99});
    CHECK(parse({"--tokens=4"}).lesson_int_list("--tokens", 0, 100, {}) == std::vector<int>{4});
    CHECK_THROWS_MATCHES(parse({"--tokens", "3,101"}).lesson_int_list("--tokens", 0, 100, {}), pa::FlagError,
                         MessageMatches(ContainsSubstring("--tokens must be in [0, 100], got 101")));
    CHECK_THROWS_MATCHES(parse({"--tokens", "3,"}).lesson_int_list("--tokens", 0, 100, {}), pa::FlagError,
                         MessageMatches(ContainsSubstring("--tokens expects a comma-separated list")));
}

TEST_CASE("the bad-input line names the program and the problem on one line", "[cpu][flags]") {
    CHECK(pa::bad_input_line("lesson06_wgmma_prefill", "--sigma expects a number, got 'x'") ==
          "error: lesson06_wgmma_prefill: --sigma expects a number, got 'x'");
    CHECK(pa::bad_input_line("p", "m").find('\n') == std::string::npos);
}
