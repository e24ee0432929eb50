// lesson03_split_k: checks split-k's ladder (steps 1 to 8: partitions with the sentinel and
// the reduce, the fused merge, tensor cores, longest first, unit copies, head rows, the flat
// merge, the cluster merge) and the plans against the CPU reference, then measures the ladder beside lesson 02's
// single pass on Table A, Table B, a batch of mixed lengths and 128k-token contexts; --sweep
// measures the plans across partition sizes instead, with the single-pass/split-k rules of the
// posts, vLLM's, a split-count rule and this lesson's own.
//
//   lesson03_split_k                       check, then the ladder's measurement
//   lesson03_split_k --sweep               check, then the plans across partition sizes and the dispatch table
//   lesson03_split_k --check               check only (what the sanitizer tests run)
//   lesson03_split_k --bench --shape mqa-B16-ctx4k [--variant tensor_cores] [--partition 512]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "decode_driver.cuh"
#include "decode_reference.h"
#include "flags.h"
#include "split_k.h"

namespace {

const char* kProgram = "lesson03_split_k";

const pa::LessonFlag kPartitionFlag{"--partition", true,
                                    "--partition P   every step at partitions of P tokens (default: each step's plan for the shape)",
                                    {}};
const pa::LessonFlag kSweepFlag{"--sweep", false,
                                "--sweep         measure the plans across partition sizes (sweep_variants) instead of the "
                                "ladder: the dispatch and long-context tables' data (lesson03_sweep.csv)",
                                {}};

// What the command line asks for beyond the shared flags: --sweep, --partition P. Input it
// cannot read is left to the driver, which refuses it in one line (exit 2).
struct Mode {
    bool sweep = false;
    int partition = 0;
};

Mode mode_of(int argc, char** argv, const pa::DecodeLessonSpec& spec) {
    Mode m;
    try {
        const pa::Flags f = pa::parse_flags(argc, argv, spec.flags);
        m.sweep = f.has(kSweepFlag.name);
        m.partition = static_cast<int>(f.lesson_int(kPartitionFlag.name, 32, 1 << 20, 0));
    } catch (const pa::FlagError&) {
    }
    return m;
}

// The split-k variants a run measures (every variant but single_pass and auto).
std::vector<std::string> g_split_variants;

// With --variant NAME naming a plan (lesson03::parse_plan_name: any plan can be named, e.g.
// split_k_units_lpt_4096 or partitions_tgs8_1000), adds that plan's variant to the run.
void add_named_plan(int argc, char** argv, pa::DecodeLessonSpec& spec) {
    pa::Flags f;
    try {
        f = pa::parse_flags(argc, argv, spec.flags);
    } catch (const pa::FlagError&) {
        return;
    }
    lesson03::SplitPlan named;
    if (f.variant.empty() || !lesson03::parse_plan_name(f.variant, &named)) return;
    const std::string name = lesson03::plan_name(named);
    auto known = [&](const std::vector<pa::DecodeVariant>& vs) {
        return std::any_of(vs.begin(), vs.end(), [&](const pa::DecodeVariant& v) { return v.name == name; });
    };
    if (!known(spec.variants) && !known(spec.check_only_variants)) spec.variants.push_back(lesson03::variant(named));
}

const std::vector<std::string>& split_variants() { return g_split_variants; }

std::vector<std::string> all_measured() {
    std::vector<std::string> v = {"single_pass"};
    v.insert(v.end(), split_variants().begin(), split_variants().end());
    return v;
}

// The variant a rule's choice stands for among the measured ones.
std::string variant_of(const lesson03::Choice& c, bool split_count) {
    if (!c.split) return "single_pass";
    return split_count ? "split_k_even" : lesson03::plan_name(c.plan);
}

struct Rule {
    const char* name;
    std::function<lesson03::Choice(const lesson03::ShapeFacts&)> choose;
    bool split_count;
};

const std::vector<Rule> kRules = {
    {"post 1", lesson03::post_rule_1, false},
    {"post 2", lesson03::post_rule_2, false},
    {"vLLM", lesson03::vllm_rule, false},
    {"split count", lesson03::split_count_rule, true},
};

// Table A and Table B: single pass against split-k, the winner, and each rule's pick
// (right = within 5 % of the best measured); ours is the `auto` row.
void print_dispatch(const pa::RowIndex& idx, const std::vector<pa::DecodeShape>& shapes, const pa::DeviceInfo& info) {
    std::printf("\nSingle pass (SP) or split-k (SK)? L2-cold medians, us; a pick is right (+) within 5 %% of the best\n");
    std::vector<std::string> header = {"shape", "B*Hkv", "SP us", "best SK", "SK us", "winner", "auto", "auto us"};
    for (const auto& r : kRules) header.push_back(r.name);
    header.push_back("ours");
    pa::TextTable t(header);
    std::vector<int> right(kRules.size() + 1, 0);
    int counted = 0;
    for (const auto& s : shapes) {
        const auto sp = idx.best_of(s.name, {"single_pass"});
        const auto sk = idx.best_of(s.name, split_variants());
        const auto best = idx.best_of(s.name, all_measured());
        const pa::ResultRow* au = idx.get(s.name, "auto");
        if (sp.first == "-" || sk.first == "-" || !au) continue;
        ++counted;
        auto mark = [&](double us) { return us <= 1.05 * best.second ? "+" : "-"; };
        std::vector<std::string> row = {s.name, std::to_string(static_cast<long long>(s.B) * s.Hkv), pa::strf("%.2f", sp.second),
                                        sk.first, pa::strf("%.2f", sk.second), sp.second <= sk.second ? "SP" : "SK",
                                        au->get_extra("auto_pick"), pa::strf("%.2f", au->us_median)};
        const lesson03::ShapeFacts f = lesson03::facts_of(s, info.sms);
        for (size_t i = 0; i < kRules.size(); ++i) {
            const std::string v = variant_of(kRules[i].choose(f), kRules[i].split_count);
            const pa::ResultRow* r = idx.get(s.name, v);
            const bool ok = r && r->us_median <= 1.05 * best.second;
            right[i] += ok;
            row.push_back((v == "single_pass" ? std::string("SP ") : std::string("SK ")) + (r ? mark(r->us_median) : "?"));
        }
        const bool ok = au->us_median <= 1.05 * best.second;
        right[kRules.size()] += ok;
        row.push_back(ok ? "+" : "-");
        t.add_row(row);
    }
    t.print();
    std::printf("right (of %d):", counted);
    for (size_t i = 0; i < kRules.size(); ++i) std::printf("  %s %d", kRules[i].name, right[i]);
    std::printf("  ours %d\n", right[kRules.size()]);
}

bool g_sweep = false;

void summarize(const std::vector<pa::ResultRow>& rows, const std::vector<pa::DecodeShape>& shapes) {
    const pa::RowIndex idx(rows);
    const pa::DeviceInfo& info = pa::current_device_info();
    std::vector<pa::DecodeShape> table_ab;
    std::set<std::string> measured;
    for (const auto& s : shapes) measured.insert(s.name);
    for (const auto& list : {pa::table_a(), pa::table_b()})
        for (const auto& s : list)
            if (measured.count(s.name)) table_ab.push_back(s);
    if (g_sweep) print_dispatch(idx, table_ab, info);  // which plan wins needs the plans across sizes
    std::printf("\n(the posts' published times beside these: the README tables written by plots/tables.py)\n");
    std::printf("\nauto rule (ours, split_plan.h): single pass when B * Hkv fills 90 %% of the SMs and the batch is even;\n"
                "else split-k with the largest power-of-two partition (at least 128 tokens, 256 for a group of 8, and\n"
                "1/16 of the longest context in the partition kernel; at most 4096 for a mixed batch, started longest\n"
                "first) whose CTAs give every SM one (two for groups up to 8, one from 4096 tokens in an even batch),\n"
                "64 tokens when a short context would get fewer than 8; fused for groups of 1 and 2, head rows for\n"
                "groups of 9 to 32, unit copies from 128 tokens (sm_90); single pass after all when that leaves one\n"
                "partition, unless lesson 02 would run its per-head kernel and the partition copies units\n");
}

}  // namespace

int main(int argc, char** argv) {
    pa::DecodeLessonSpec spec;
    spec.program = kProgram;
    spec.lesson = "03";
    spec.title = "Lesson 03: split-k with a sentinel reduce, fused or two kernels, against lesson 02's single pass";
    spec.extra_usage =
        "The ladder (each step a variant, at its plan for the shape; --partition P sets every step's partition):\n"
        "  partitions (step 1: lesson 02's step 2 with a partition axis, then the reduce; every sm_80+ GPU),\n"
        "  fused_merge (step 2: the last partition CTA merges), tensor_cores (step 3: lesson 02's step 10 kernel\n"
        "  with partitions), longest_first (step 4), unit_copies (step 5, sm_90), head_rows (step 6, groups of\n"
        "  9 to 32, sm_90), flat_merge (step 7: the head-row slices merged with every load in flight),\n"
        "  cluster_merge (step 8: the partitions of a sequence one thread-block cluster, merged in it; sm_90).\n"
        "  --variant also takes any plan by its name: split_k_<P>, split_k_fused_<P>, split_k_rows_<P>,\n"
        "  split_k_rows_flat_<P>, split_k_rows_units_flat_cluster_<P>, split_k_even<S>, split_k_units_<P>,\n"
        "  split_k_units_lpt_<P>, partitions_tgs8_<P>,\n"
        "  fused_merge_tgs8_<P> (e.g. split_k_units_lpt_512, partitions_tgs8_1000, split_k_rows_even6).\n"
        "Long-context shapes (not in the catalogue list above): llama70b-B16-mixed, llama70b-B1-ctx128k,\n"
        "mqa-B1-ctx128k.\n";
    spec.flags = {kPartitionFlag, kSweepFlag};
    const Mode mode = mode_of(argc, argv, spec);
    g_sweep = mode.sweep;
    spec.variants = mode.sweep ? lesson03::sweep_variants() : lesson03::bench_variants(mode.partition);
    spec.check_only_variants = lesson03::check_only_variants();
    spec.check_shapes = pa::decode_check_shapes();
    for (const auto& s : lesson03::split_check_shapes()) spec.check_shapes.push_back(s);
    spec.bench_shapes = lesson03::bench_shapes();
    spec.reference = [](const pa::DecodeProblem& p) { return pa::reference::softmax_decode(p); };
    spec.annotate = [variants = spec.variants, partition = mode.partition](const pa::DecodeShape& s, pa::ResultRow& row) {
        const pa::DeviceInfo& info = pa::current_device_info();
        for (const auto& v : variants)  // partition CTAs per (sequence, KV head) of the row's variant
            if (v.name == row.variant) row.set_extra("splits", std::to_string(v.geometry(s, info).partitions));
        for (int step = 1; step <= lesson03::kLadderSteps; ++step)  // the plan a ladder step ran
            if (row.variant == lesson03::step_name(step))
                row.set_extra("plan", lesson03::plan_name(lesson03::ladder_plan(step, s, info, partition)));
        if (row.variant == "auto") {
            const lesson03::ShapeFacts f = lesson03::facts_of(s, info.sms);
            const lesson03::Choice c = lesson03::auto_choice(s, info);  // what ran: refusals included
            row.set_extra("auto_pick", c.split ? lesson03::plan_name(c.plan) : "single_pass");
            // what each rule would run here, among the measured variants (for the README's table)
            const char* columns[] = {"rule_post1", "rule_post2", "rule_vllm", "rule_split_count"};
            for (size_t i = 0; i < kRules.size(); ++i)
                row.set_extra(columns[i], variant_of(kRules[i].choose(f), kRules[i].split_count));
        }
    };
    spec.summarize = summarize;
    spec.passes = [](const pa::Flags& f) {  // the flags' values, refused here in one line (exit 2)
        f.lesson_int(kPartitionFlag.name, 32, 1 << 20, 0);
        if (f.has(kSweepFlag.name) && f.has(kPartitionFlag.name))
            throw pa::FlagError("--sweep measures every partition size; it takes no --partition");
        return std::vector<pa::LessonPass>{};
    };
    add_named_plan(argc, argv, spec);
    for (const auto& v : spec.variants)
        if (v.name != "single_pass" && v.name != "auto") g_split_variants.push_back(v.name);
    return pa::run_decode_lesson(argc, argv, spec);
}
