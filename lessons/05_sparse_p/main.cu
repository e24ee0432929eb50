// lesson05_sparse_p: checks the thirteen steps of the gated decode (gate, k_ahead, smem_pages,
// l2_hints, scores_in_slot, bulk_rows, dense, zero_skip, compact_atomic, compact_ordered,
// split_k_compact, split_k_cluster, branchless_gate; split_k_cluster on sm_90 only)
// against the CPU reference at sigma 0, 1.5 and 2.9, then measures them on Table C with the
// byte model beside every row: the share of zero weights per query head and per KV row, the
// bytes a decode that skips the unused V rows needs, and the speedup those bytes allow over
// the dense kernel.
//
//   lesson05_sparse_p                         check, then Table C at the three sigmas
//   lesson05_sparse_p --check                 check only (what the sanitizer tests run)
//   lesson05_sparse_p --bench --shape h8kv4-B32-ctx1k --sigma 1.5 [--variant compact_ordered]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "ceilings.cuh"
#include "decode_driver.cuh"
#include "gated_reference.h"
#include "gather_floor.h"
#include "lesson05.h"
#include "sparsity.h"

namespace {

const char* kProgram = "lesson05_sparse_p";
const std::vector<double> kSigmas = {0.0, 1.5, 2.9};

// The gate every variant reads at launch; each pass of the run sets it.
const lesson05::Gate g_gate = lesson05::make_gate(0.0);

std::string sigma_label(double sigma) { return pa::strf("%g", sigma); }

// The zeros of the last problem the reference ran on, at the current gate, counted when a
// measured row first asks (annotate), once per (shape, sigma, gamma).
const pa::DecodeProblem* g_last_problem = nullptr;
std::map<std::string, lesson05::Sparsity> g_sparsity;

// What the per-(shape, sigma, gamma) caches below are keyed by.
std::string gate_key(const pa::DecodeShape& s) { return s.name + pa::strf("|%g|%g", g_gate->sigma, g_gate->gamma); }

const lesson05::Sparsity& sparsity_of(const pa::DecodeShape& s) {
    const std::string key = gate_key(s);
    auto it = g_sparsity.find(key);
    if (it == g_sparsity.end()) {
        if (!g_last_problem || g_last_problem->shape.name != s.name)
            throw std::runtime_error("lesson05: no problem of shape " + s.name + " to count zeros on");
        it = g_sparsity.emplace(key, lesson05::measure_sparsity(*g_last_problem, *g_gate)).first;
    }
    return it->second;
}

// The two gathers (gather_floor.h) of the same (shape, sigma, gamma), timed once.
std::map<std::string, lesson05::GatherFloor> g_gathers;

const lesson05::GatherFloor& gather_floor_of(const pa::DecodeShape& s) {
    const std::string key = gate_key(s);
    auto it = g_gathers.find(key);
    if (it == g_gathers.end()) {
        const lesson05::Sparsity& z = sparsity_of(s);  // also: g_last_problem is of this shape
        it = g_gathers.emplace(key, lesson05::time_gather_floor(*g_last_problem, z.row_used, z.max_ctx)).first;
    }
    return it->second;
}

double parse_number(const pa::Flags& f, const std::string& flag, double fallback) {
    auto it = f.lesson.find(flag);
    if (it == f.lesson.end()) return fallback;
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !std::isfinite(v))
        throw pa::FlagError(flag + " needs a number (got '" + it->second + "')");
    return v;
}

std::vector<pa::LessonPass> passes(const pa::Flags& f) {
    const double gamma = parse_number(f, "--gamma", 1.0);
    std::vector<double> sigmas = kSigmas;
    if (f.has("--sigma")) sigmas = {parse_number(f, "--sigma", 0.0)};
    std::vector<pa::LessonPass> out;
    for (double sigma : sigmas) {
        pa::reference::GateParams g;
        g.sigma = sigma;
        g.gamma = gamma;
        try {
            pa::reference::validate_gate(g);
        } catch (const std::invalid_argument& e) {
            throw pa::FlagError(e.what());
        }
        out.push_back({pa::strf("sigma %g, gamma %g", sigma, gamma), [g] { *g_gate = g; }});
    }
    return out;
}

// n short lengths around pages and tiles (1, 127, 128, 129, 256, ...), for a batch large
// enough that a CTA streams two sequences (sparsity.h: seqs_per_cta).
std::vector<int> many_short(int n) {
    const int lengths[] = {1, 127, 128, 129, 256, 300, 77, 384};
    std::vector<int> ctx(n);
    for (int i = 0; i < n; ++i) ctx[i] = lengths[i % 8];
    return ctx;
}

// Small and awkward on purpose: one token, lengths around pages and tiles, mixed lengths,
// groups 1, 2, 4 and 8, pages of 8, 16 and 32, both dtypes, a batch whose CTAs stream two
// sequences each; small enough for the sanitizer.
std::vector<pa::DecodeShape> check_shapes() {
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    auto shape = [](int H, int Hkv, std::vector<int> ctx, int bs, pa::DType t) {
        const std::string name = "check-B" + std::to_string(ctx.size()) + "-H" + std::to_string(H) + "-Hkv" +
                                 std::to_string(Hkv) + "-bs" + std::to_string(bs) + "-" + pa::dtype_name(t);
        return pa::make_shape(name, H, Hkv, std::move(ctx), 128, bs, t);
    };
    return {
        shape(1, 1, {1}, 16, f),                         // one token, group 1
        shape(8, 4, {1, 17, 300}, 8, b),                 // group 2, mixed, not multiples of a page
        shape(8, 1, {31, 128, 129, 700}, 16, f),         // group 8, around a tile
        shape(4, 4, {513, 1000}, 32, b),                 // group 1, pages of 32
        shape(16, 4, {16, 7, 300, 255, 2049}, 16, b),    // group 4, a tile + 1 past 2048
        shape(8, 4, {2048, 1531}, 16, f),                // h8kv4 heads, long and odd
        shape(4, 2, many_short(265), 16, b),             // 530 CTAs' worth: two sequences per CTA (132 SMs), one left over
    };
}

// The H200 post's gains (gated attention, its kernels): +2 % for zero-skip, about 30 % for
// compaction, up to 80 % for compaction inside split-k on some shapes.
void print_posts() {
    std::printf("\nThe H200 post's gains for the same ideas (its kernels, its shapes): zero-skip +2 %%, compaction "
                "~30 %%,\ncompaction inside split-k up to 80 %% on some shapes.\n");
}

void summarize(const std::vector<pa::ResultRow>& rows, const std::vector<pa::DecodeShape>& shapes) {
    const pa::DeviceInfo& info = pa::current_device_info();
    // rows of one (shape, sigma), by variant (L2-cold)
    auto find = [&](const std::string& shape, const std::string& sigma, const std::string& variant) -> const pa::ResultRow* {
        for (const auto& r : rows)
            if (r.shape == shape && r.l2 == "cold" && r.variant == variant && r.get_extra("sigma") == sigma) return &r;
        return nullptr;
    };
    std::vector<std::string> sigmas;
    for (const auto& r : rows)
        if (std::find(sigmas.begin(), sigmas.end(), r.get_extra("sigma")) == sigmas.end()) sigmas.push_back(r.get_extra("sigma"));

    std::printf("\nTable C with the byte model (L2-cold medians, us). zeros/head: share of p == 0 per query head (mean,\n"
                "min..max over heads); zeros/row: V rows no head of the CTA uses; limit = dense bytes / needed bytes;\n"
                "read: a plain read of the dense bytes, read needed: of the needed ones; gather, gather needed: the\n"
                "same rows as the kernels read, at their places in the pages; x = dense time / this time;\n"
                "%% lim = x / limit.\n");
    pa::TextTable t({"shape", "sigma", "zeros/head", "zeros/row", "MiB", "needed", "limit", "read", "read needed", "gather",
                     "gather needed", "dense", "% BW",
                     "zero_skip", "atomic", "ordered", "split_k", "cluster", "x ordered", "% lim", "x atomic", "x split",
                     "x cluster"});
    for (const auto& s : shapes)
        for (const auto& sg : sigmas) {
            const pa::ResultRow* d = find(s.name, sg, "dense");
            if (!d) continue;
            auto us = [&](const char* v) {
                const pa::ResultRow* r = find(s.name, sg, v);
                return r ? pa::strf("%.2f", r->us_median) : std::string("-");
            };
            auto speedup = [&](const char* v) {
                const pa::ResultRow* r = find(s.name, sg, v);
                return r ? pa::strf("%.2f", d->us_median / r->us_median) : std::string("-");
            };
            const pa::ResultRow* o = find(s.name, sg, "compact_ordered");
            const double limit = std::atof(d->get_extra("limit_speedup").c_str());
            auto share = [&](const char* key) { return 100 * std::atof(d->get_extra(key).c_str()); };
            t.add_row({s.name, sg,
                       pa::strf("%.1f %% (%.1f..%.1f)", share("zero_share"), share("zero_share_min_head"),
                                share("zero_share_max_head")),
                       pa::strf("%.1f %%", share("row_zero_share")),
                       pa::strf("%.1f", *d->bytes / 1048576.0),
                       pa::strf("%.1f", std::atof(d->get_extra("bytes_needed").c_str()) / 1048576.0),
                       pa::strf("%.2f", limit), d->get_extra("plain_read_us"), d->get_extra("needed_read_us"),
                       d->get_extra("dense_gather_us"), d->get_extra("needed_gather_us"), us("dense"), pa::strf("%.1f", *d->pct_read_bw),
                       us("zero_skip"),
                       us("compact_atomic"), us("compact_ordered"), us("split_k_compact"), us("split_k_cluster"),
                       speedup("compact_ordered"),
                       o && limit > 0 ? pa::strf("%.0f", 100 * d->us_median / o->us_median / limit) : std::string("-"),
                       speedup("compact_atomic"), speedup("split_k_compact"), speedup("split_k_cluster")});
        }
    t.print();
    std::printf("(%s; %% BW: the dense kernel's cold GB/s over the measured read bandwidth)\n", info.name.c_str());
    print_posts();
}

}  // namespace

int main(int argc, char** argv) {
    pa::DecodeLessonSpec spec;
    spec.program = kProgram;
    spec.lesson = "05";
    spec.title =
        "Lesson 05: sparse P compaction in the gated decode (dense, zero-skip, compaction, ordered, split-k, cluster merge)";
    spec.extra_usage =
        "Table C shapes (besides the catalogue): h8kv4-B{1,32,64,128}-ctx{256,512,1k,2k}.\n"
        "Only D 128 and groups up to 8 run here; other shapes are refused by name.\n";
    spec.variants = lesson05::variants(g_gate);
    spec.check_shapes = check_shapes();
    spec.bench_shapes = pa::table_c_grid();
    spec.flags = {{"--sigma", true, "--sigma S   one gate sparsity, 0 <= S < 3 (default: 0, 1.5 and 2.9)", {}},
                  {"--gamma", true, "--gamma G   the gate's scale, > 0 (default 1)", {}}};
    spec.passes = passes;
    spec.reference = [](const pa::DecodeProblem& p) {
        g_last_problem = &p;
        return pa::reference::gated_decode(p, *g_gate);
    };
    spec.annotate = [](const pa::DecodeShape& s, pa::ResultRow& row) {
        const lesson05::Sparsity& z = sparsity_of(s);
        const long long dense = pa::decode_bytes_needed(s);
        const long long needed = lesson05::sparse_bytes_needed(dense, s, z);
        row.set_extra("sigma", sigma_label(g_gate->sigma));
        row.set_extra("gamma", pa::strf("%g", g_gate->gamma));
        row.set_extra("zero_share", pa::strf("%.4f", z.zero_share()));
        row.set_extra("row_zero_share", pa::strf("%.4f", z.row_zero_share()));
        row.set_extra("bytes_needed", std::to_string(needed));
        row.set_extra("limit_speedup", pa::strf("%.4f", lesson05::limit_speedup(dense, needed)));
        const auto [lo, hi] = std::minmax_element(z.head_zero_share.begin(), z.head_zero_share.end());
        row.set_extra("zero_share_min_head", pa::strf("%.4f", *lo));
        row.set_extra("zero_share_max_head", pa::strf("%.4f", *hi));
        // what a plain read of the dense bytes takes at this size, L2-cold (the same for every row
        // of a shape), and one of the bytes needed: no kernel that must read them, in whatever
        // order, beats it, and unlike the limit it counts a launch's fixed costs
        row.set_extra("plain_read_us", pa::strf("%.2f", pa::streaming_read_us(pa::current_device_info(), dense)));
        row.set_extra("needed_read_us", pa::strf("%.2f", pa::streaming_read_us(pa::current_device_info(), needed)));
        // the same rows the kernels read, at their places in the pools (pages of 4 KiB, V rows of
        // 256 bytes), with nothing else to do: the floor for a kernel that reads them
        // (pages of more than 32 tokens: no gather, the columns stay empty)
        if (s.block_size <= lesson05::kGatherMaxBlockSize) {
            const lesson05::GatherFloor& gather = gather_floor_of(s);
            row.set_extra("dense_gather_us", pa::strf("%.2f", gather.dense_us));
            row.set_extra("needed_gather_us", pa::strf("%.2f", gather.needed_us));
        }
        row.set_extra("partitions", std::to_string(lesson05::partitions_for(row.variant, s, pa::current_device_info().sms)));
    };
    spec.summarize = summarize;
    return pa::run_decode_lesson(argc, argv, spec);
}
