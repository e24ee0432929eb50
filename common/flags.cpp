#include "flags.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace pa {

namespace {

constexpr int kMaxCtx = 1 << 20;  // 1M tokens: far beyond any lesson, small enough to never overflow an int product

}  // namespace

long long parse_integer(const std::string& flag, const std::string& text, long long lo, long long hi) {
    if (text.empty()) throw FlagError(flag + " needs a value");
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || *end != '\0')
        throw FlagError(flag + " expects an integer, got '" + text + "'");
    if (v < lo || v > hi)
        throw FlagError(flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + text);
    return v;
}

double parse_real(const std::string& flag, const std::string& text, double lo, double hi) {
    if (text.empty()) throw FlagError(flag + " needs a value");
    // strtod also reads "nan", "inf" and hex floats; a flag takes plain decimal numbers only
    const bool decimal = text.find_first_not_of("0123456789+-.eE") == std::string::npos;
    errno = 0;
    char* end = nullptr;
    const double v = decimal ? std::strtod(text.c_str(), &end) : 0.0;
    if (!decimal || errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v))
        throw FlagError(flag + " expects a number, got '" + text + "'");
    if (v < lo || v > hi) {
        std::ostringstream m;
        m << flag << " must be in [" << lo << ", " << hi << "], got " << text;
        throw FlagError(m.str());
    }
    return v;
}

std::vector<int> parse_int_list(const std::string& flag, const std::string& text, long long lo, long long hi) {
    std::vector<int> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) throw FlagError(flag + " has an empty item in '" + text + "'");
        out.push_back(static_cast<int>(parse_integer(flag, item, lo, hi)));
    }
    if (out.empty() || text.back() == ',') throw FlagError(flag + " expects a comma-separated list of integers, got '" + text + "'");
    return out;
}

std::string bad_input_line(const std::string& program, const std::string& message) {
    return "error: " + program + ": " + message;
}

void exit_bad_input(const std::string& program, const std::string& message) {
    std::fflush(stdout);  // what was printed before comes before the error
    std::fprintf(stderr, "%s\n", bad_input_line(program, message).c_str());
    std::exit(kExitBadInput);
}

double Flags::lesson_real(const std::string& lesson_flag, double lo, double hi, double fallback) const {
    auto it = lesson.find(lesson_flag);
    if (it == lesson.end()) return fallback;
    return parse_real(lesson_flag, it->second, lo, hi);
}

std::vector<int> Flags::lesson_int_list(const std::string& lesson_flag, long long lo, long long hi,
                                        const std::vector<int>& fallback) const {
    auto it = lesson.find(lesson_flag);
    if (it == lesson.end()) return fallback;
    return parse_int_list(lesson_flag, it->second, lo, hi);
}

long long Flags::lesson_int(const std::string& lesson_flag, long long lo, long long hi, long long fallback) const {
    auto it = lesson.find(lesson_flag);
    if (it == lesson.end()) return fallback;
    return parse_integer(lesson_flag, it->second, lo, hi);
}

Flags parse_flags(int argc, const char* const* argv, const std::vector<LessonFlag>& lesson_flags) {
    Flags f;
    std::vector<std::string> given;  // shared flags seen, for LessonFlag::excludes
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_inline_value = false;
        if (arg.rfind("--", 0) == 0) {
            const auto eq = arg.find('=');
            if (eq != std::string::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_inline_value = true;
            }
        }
        auto need_value = [&]() -> std::string {
            if (has_inline_value) return value;
            if (i + 1 >= argc) throw FlagError(arg + " needs a value");
            return argv[++i];
        };
        auto no_value = [&]() {
            if (has_inline_value) throw FlagError(arg + " takes no value");
        };
        const LessonFlag* lf = nullptr;
        for (const auto& l : lesson_flags)
            if (l.name == arg) lf = &l;
        if (lf) {
            if (lf->takes_value) {
                const std::string v = need_value();
                if (v.empty()) throw FlagError(arg + " needs a value");
                f.lesson[arg] = v;
            } else {
                no_value();
                f.lesson[arg] = "";
            }
            continue;
        }
        given.push_back(arg);
        if (arg == "--check") { no_value(); f.check_only = true; }
        else if (arg == "--bench") { no_value(); f.bench_only = true; }
        else if (arg == "--help" || arg == "-h") { no_value(); f.help = true; }
        else if (arg == "--shape") {
            const std::string name = need_value();
            if (name.empty()) throw FlagError("--shape needs a name");
            f.shapes.push_back(name);
        }
        else if (arg == "--B") f.B = static_cast<int>(parse_integer(arg, need_value(), 1, 65535));
        else if (arg == "--H") f.H = static_cast<int>(parse_integer(arg, need_value(), 1, 1024));
        else if (arg == "--Hkv") f.Hkv = static_cast<int>(parse_integer(arg, need_value(), 1, 1024));
        else if (arg == "--D") f.D = static_cast<int>(parse_integer(arg, need_value(), 1, 4096));
        else if (arg == "--block-size") f.block_size = static_cast<int>(parse_integer(arg, need_value(), 1, 4096));
        else if (arg == "--ctx") f.ctx = parse_int_list(arg, need_value(), 1, kMaxCtx);
        else if (arg == "--dtype") {
            DType t;
            const std::string v = need_value();
            if (!parse_dtype(v, &t)) throw FlagError("--dtype must be fp16 or bf16, got '" + v + "'");
            f.dtype = t;
        }
        else if (arg == "--csv") { f.csv = need_value(); if (f.csv.empty()) throw FlagError("--csv needs a file name"); }
        else if (arg == "--iters") f.iters = static_cast<int>(parse_integer(arg, need_value(), 1, 100000));
        else if (arg == "--seed") f.seed = static_cast<unsigned long long>(parse_integer(arg, need_value(), 0, LLONG_MAX));
        else if (arg == "--variant") { f.variant = need_value(); if (f.variant.empty()) throw FlagError("--variant needs a name"); }
        else throw FlagError("unknown flag '" + std::string(argv[i]) + "'");
    }
    if (f.check_only && f.bench_only) throw FlagError("--check and --bench exclude each other (give neither to run both)");
    for (const auto& l : lesson_flags) {
        if (!f.has(l.name)) continue;
        for (const auto& x : l.excludes)
            for (const auto& g : given)
                if (g == x) throw FlagError(l.name + " cannot be combined with " + x);
    }
    if (!f.shapes.empty() && f.explicit_shape())
        throw FlagError("--shape and an explicit shape (--B/--H/--Hkv/--ctx/--D/--block-size) exclude each other");
    if (f.explicit_shape()) {
        if (!f.B || !f.H || !f.Hkv || f.ctx.empty())
            throw FlagError("an explicit shape needs --B, --H, --Hkv and --ctx (--D, --block-size, --dtype are optional)");
        if (f.ctx.size() != 1 && static_cast<int>(f.ctx.size()) != *f.B)
            throw FlagError("--ctx gives " + std::to_string(f.ctx.size()) + " lengths but --B is " + std::to_string(*f.B) +
                            " (give one length, or one per sequence)");
    }
    return f;
}

void validate_decode_shape(const DecodeShape& s) {
    const std::string who = "shape " + s.name + ": ";
    if (s.B < 1) throw FlagError(who + "B must be at least 1");
    if (s.Hkv < 1 || s.H < 1) throw FlagError(who + "H and Hkv must be at least 1");
    if (s.H % s.Hkv != 0)
        throw FlagError(who + "H (" + std::to_string(s.H) + ") must be a multiple of Hkv (" + std::to_string(s.Hkv) + ")");
    if (s.D != 64 && s.D != 128 && s.D != 256)
        throw FlagError(who + "head size D=" + std::to_string(s.D) + " is not supported (64, 128 or 256)");
    if (s.block_size != 8 && s.block_size != 16 && s.block_size != 32)
        throw FlagError(who + "page size " + std::to_string(s.block_size) + " is not supported (8, 16 or 32)");
    if (static_cast<int>(s.ctx.size()) != s.B) throw FlagError(who + "needs one context length per sequence");
    for (int c : s.ctx)
        if (c < 1 || c > kMaxCtx) throw FlagError(who + "context lengths must be in [1, " + std::to_string(kMaxCtx) + "]");
}

std::vector<DecodeShape> select_shapes(const Flags& f, const std::vector<DecodeShape>& defaults) {
    std::vector<DecodeShape> out;
    if (!f.shapes.empty()) {
        for (const auto& name : f.shapes) {
            const std::optional<DecodeShape> s = find_shape(name);
            if (!s) throw FlagError("unknown shape '" + name + "' (the catalogue names are listed by --help)");
            out.push_back(*s);
        }
    } else if (f.explicit_shape()) {
        const int D = f.D.value_or(128), bs = f.block_size.value_or(16);
        const bool mixed = f.ctx.size() != 1;
        const std::string name = "custom-B" + std::to_string(*f.B) + "-H" + std::to_string(*f.H) + "-Hkv" +
                                 std::to_string(*f.Hkv) + "-ctx" + (mixed ? std::string("mixed") : ctx_label(f.ctx[0])) +
                                 "-D" + std::to_string(D) + "-bs" + std::to_string(bs);
        out.push_back(make_shape(name, *f.H, *f.Hkv, mixed ? f.ctx : std::vector<int>(*f.B, f.ctx[0]), D, bs));
    } else {
        out = defaults;
    }
    for (auto& s : out) {
        if (f.dtype) s.dtype = *f.dtype;
        validate_decode_shape(s);
    }
    return out;
}

std::string common_usage_line(const std::string& program) {
    return "usage: " + program + " [--check | --bench] [--shape NAME ...] [--csv FILE] [--iters N] [--seed N] [--variant NAME] [--help]\n";
}

std::string decode_usage(const std::string& program, const std::string& extra) {
    std::ostringstream u;
    u << "usage: " << program << " [--check | --bench] [--shape NAME ... | --B N --H N --Hkv N --ctx N[,N...] [--D N] [--block-size N]]\n"
      << "       [--dtype fp16|bf16] [--csv FILE] [--iters N] [--seed N] [--variant NAME] [--help]\n"
      << "With no flags: the correctness check over the lesson's shape set (prints N/N PASS),\n"
      << "then the measurement table over its benchmark shapes.\n"
      << "Exit codes: 0 ok, 1 a check failed, 2 invalid input, 3 no usable GPU.\n";
    if (!extra.empty()) u << extra;
    u << "Catalogue shapes:";
    int col = 0;
    for (const auto& s : shape_catalogue()) {
        u << (col % 4 == 0 ? "\n  " : "  ") << s.name;
        ++col;
    }
    u << "\n";
    return u.str();
}

Flags parse_flags_or_exit(int argc, const char* const* argv, const std::string& usage,
                          const std::vector<LessonFlag>& lesson_flags) {
    try {
        Flags f = parse_flags(argc, argv, lesson_flags);
        if (f.help) {
            std::fputs(usage.c_str(), stdout);
            if (!lesson_flags.empty()) std::fputs("This lesson's own flags:\n", stdout);
            for (const auto& l : lesson_flags) std::printf("%s\n", l.help.c_str());
            std::exit(0);
        }
        return f;
    } catch (const FlagError& e) {
        std::fprintf(stderr, "error: %s (see --help)\n", e.what());
        std::exit(kExitBadInput);
    }
}

}  // namespace pa
