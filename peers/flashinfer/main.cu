// The FlashInfer peer: FlashInfer's own paged-attention kernels, with its own planners, on
// this repository's paged cache, measured the way the lessons measure themselves.
//
//   flashinfer_decode     BatchDecode (CUDA cores) after DecodePlan, FlashInfer's split-k
//                         planner; compiled for groups (H / Hkv) 1, 2, 3, 4, 6, 8, 16 only
//   flashinfer_decode_tc  BatchPrefill with one query row per sequence after PrefillPlan: what
//                         FlashInfer's Python wrapper runs for decode with use_tensor_cores=True,
//                         any group
//   flashinfer_prefill    BatchPrefill, causal, over the paged cache (prefix 0), bf16: lesson
//                         06's prompt shapes; FlashInfer's portable FlashAttention-2 template
//   flashinfer_prefill_sm90  the same call on FlashInfer's Hopper backend (its FA3-style kernels,
//                         sm_90a, after its own planner PrefillSM90Plan); built only with 90a and
//                         CUTLASS beside FlashInfer's headers, run only on an sm_90 GPU
//
// The cache is common/'s: K and V pools [num_blocks, Hkv, 16, D] (FlashInfer's HND), a random
// block table (its rows become FlashInfer's CSR page lists), NaN in every slot no sequence
// owns. Decode rows go through common/'s decode driver (check against the CPU reference, time
// L2-hot and L2-cold, check again), so their columns are the lessons' own; `lesson` is `peer`.
//
//   peer_flashinfer [--quick] [--part decode|prefill] [--shape NAME]... [--csv FILE] [--iters N]
//
// Built only when CMake is given FlashInfer's headers (-DPA_FLASHINFER_INCLUDE=<dir>, see
// peers/README.md). Exit codes as the lessons': 0, 1 a check failed, 2 bad input, 3 no GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ceilings.cuh"
#include "cuda_check.cuh"
#include "decode_driver.cuh"
#include "decode_reference.h"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "fi_launch.h"
#include "peer_shapes.h"
#include "flags.h"
#include "random.h"
#include "table.h"
#include "timer.cuh"

namespace {

const char* kProgram = "peer_flashinfer";
const char* kLesson = "peer";

using peers::PrefillShape;
using peers::prefill_shapes;

// Each sequence's pages in FlashInfer's CSR form, on the host and the device.
struct PageLists {
    std::vector<int> indptr, indices, last_page_len;
    pa::DeviceBuffer<int> d_indptr, d_indices, d_last;

    explicit PageLists(const pa::BlockTable& t, int page_size) {
        indptr.push_back(0);
        for (int b = 0; b < t.B; ++b) {
            const int ctx = t.context_lens[b];
            const int pages = (ctx + page_size - 1) / page_size;
            for (int pg = 0; pg < pages; ++pg) indices.push_back(t.block(b, pg));
            indptr.push_back(static_cast<int>(indices.size()));
            last_page_len.push_back(ctx - (pages - 1) * page_size);
        }
        d_indptr.upload(indptr);
        d_indices.upload(indices);
        d_last.upload(last_page_len);
    }

    fi_peer::PagedKv view(const void* k, const void* v, int Hkv, int page_size, int D) {
        fi_peer::PagedKv kv;
        kv.k = k;
        kv.v = v;
        kv.indices = d_indices.get();
        kv.indptr = d_indptr.get();
        kv.last_page_len = d_last.get();
        kv.batch = static_cast<int>(last_page_len.size());
        kv.num_kv_heads = Hkv;
        kv.page_size = page_size;
        kv.head_dim = D;
        return kv;
    }
};

void throw_if(const std::string& err) {
    if (!err.empty()) throw std::runtime_error(err);
}

// Why FlashInfer cannot run a decode shape here (empty when it can).
std::string decode_why_not(const pa::DecodeShape& s) {
    if (s.D != 128) return "this peer is built for D 128 only";
    return "";
}

// ---------------------------------------------------------------------------------------
// Decode: both FlashInfer decodes as DecodeVariants of common/'s driver.

std::vector<pa::ResultRow> bench_decode(const pa::BenchSetup& setup, const pa::DecodeShape& s, uint64_t seed,
                                        const std::string& only, fi_peer::Workspace& ws, std::vector<std::string>* skipped) {
    const pa::DecodeProblem p = pa::make_decode_problem(s, seed);
    const std::vector<double> ref = pa::reference::softmax_decode(p);
    PageLists pages(p.table, s.block_size);

    // Plans first: they depend on the lengths only, and a shape FlashInfer refuses is named.
    fi_peer::Plan dplan, tcplan;
    std::string d_why = decode_why_not(s), tc_why = d_why;
    if (d_why.empty())
        d_why = fi_peer::decode_plan(s.dtype, pages.indptr, s.B, s.H, s.Hkv, s.block_size, ws, &dplan);
    std::vector<int> qo_indptr(s.B + 1);
    for (int b = 0; b <= s.B; ++b) qo_indptr[b] = b;
    if (tc_why.empty()) tc_why = fi_peer::prefill_plan(qo_indptr, pages.indptr, s.B, s.H, s.Hkv, s.block_size, ws, &tcplan);
    pa::DeviceBuffer<int> d_qo(qo_indptr);
    // The two plans share the workspace: each launch re-plans into it when the other ran last.
    int last = -1;

    auto make = [&](const std::string& name, int which, const std::string& why, const fi_peer::Plan& plan) {
        pa::DecodeVariant v;
        v.name = name;
        v.why_not = [why](const pa::DecodeShape&, const pa::DeviceInfo&) { return why; };
        v.geometry = [&plan](const pa::DecodeShape&, const pa::DeviceInfo&) {
            pa::LaunchGeometry g;
            g.ctas = plan.ctas;
            return g;
        };
        v.launch = [&, which](const pa::PagedDecodeArgs& a, cudaStream_t stream) {
            if (last != which) {  // put this variant's plan back into the shared workspace
                throw_if(which == 0 ? fi_peer::decode_plan(s.dtype, pages.indptr, s.B, s.H, s.Hkv, s.block_size, ws, &dplan)
                                    : fi_peer::prefill_plan(qo_indptr, pages.indptr, s.B, s.H, s.Hkv, s.block_size, ws, &tcplan));
                last = which;
            }
            const fi_peer::PagedKv kv = pages.view(a.k_cache, a.v_cache, s.Hkv, s.block_size, s.D);
            throw_if(which == 0 ? fi_peer::decode_run(s.dtype, dplan, ws, kv, a.q, a.out, s.H, a.scale, stream)
                                : fi_peer::prefill_run(s.dtype, false, tcplan, ws, kv, a.q, d_qo.get(), a.out, s.H, a.scale, stream));
        };
        return v;
    };
    std::vector<pa::DecodeVariant> variants;
    if (only.empty() || only == "flashinfer_decode") variants.push_back(make("flashinfer_decode", 0, d_why, dplan));
    if (only.empty() || only == "flashinfer_decode_tc") variants.push_back(make("flashinfer_decode_tc", 1, tc_why, tcplan));
    for (const auto& v : variants) {
        const std::string why = v.why_not(s, setup.info);
        if (!why.empty()) skipped->push_back(v.name + " on " + s.name + ": " + why);
    }
    std::vector<pa::ResultRow> rows = pa::bench_decode_shape(setup, p, ref, variants);
    for (auto& r : rows) {
        const bool split = r.variant == "flashinfer_decode" ? dplan.split_kv : tcplan.split_kv;
        r.set_extra("fi_split_kv", split ? "1" : "0");
    }
    return rows;
}

// ---------------------------------------------------------------------------------------
// Prefill: causal, over the paged cache, timed like the decode driver (copies of K, V and q
// rotated for L2-cold), checked on sampled rows (row i of a sequence is a decode over its
// first i + 1 tokens).

// Sampled query rows of a prefill as decode problems, for reference::softmax_decode.
struct SampledRows {
    const pa::DecodeProblem& p;
    const std::vector<uint16_t>& q_rows;  // [B * T, H, D]
    int T;
    std::vector<std::pair<int, int>> rows;  // (sequence, row within it)

    int B() const { return static_cast<int>(rows.size()); }
    int H() const { return p.shape.H; }
    int Hkv() const { return p.shape.Hkv; }
    int D() const { return p.shape.D; }
    int ctx(int s) const { return rows[s].second + 1; }
    double q(int s, int h, int d) const {
        const size_t row = static_cast<size_t>(rows[s].first) * T + rows[s].second;
        return pa::decode(p.shape.dtype, q_rows[(row * H() + h) * D() + d]);
    }
    double k(int s, int t, int kvh, int d) const { return pa::PagedDecodeView(p).k(rows[s].first, t, kvh, d); }
    double v(int s, int t, int kvh, int d) const { return pa::PagedDecodeView(p).v(rows[s].first, t, kvh, d); }
};

std::vector<std::pair<int, int>> sample_rows(int B, int T, uint64_t seed) {
    std::set<std::pair<int, int>> out;
    pa::Rng rng(seed, 0x5a3b1e);
    for (int b : {0, B / 2, B - 1})
        for (int i : {0, 1, 15, 16, 17, T / 2, T - 2, T - 1})
            if (i >= 0 && i < T) out.insert({b, i});
    for (int n = 0; n < 8; ++n) out.insert({static_cast<int>(rng.below(B)), static_cast<int>(rng.below(T))});
    return {out.begin(), out.end()};
}

// Why the Hopper prefill cannot run here (empty when it can).
std::string sm90_why_not(const pa::DeviceInfo& info) {
#if defined(PA_FI_SM90_PREFILL)
    if (info.cc() != 90)
        return "needs an sm_90 GPU (FlashInfer's FA3-style kernels are sm_90a code); " + info.name + " is sm_" +
               std::to_string(info.cc());
    return "";
#elif defined(PA_FI_SM90_MISSING) && PA_FI_SM90_MISSING == 1
    (void)info;
    return "not built (90a is not among the configured CUDA architectures)";
#else
    (void)info;
    return "not built (no CUTLASS headers beside FlashInfer's; see peers/README.md)";
#endif
}

// One prefill row's FlashInfer calls: its planner, and its launch on one copy of the inputs.
struct PrefillVariant {
    std::string name;
    std::function<fi_peer::Plan()> plan;
    std::function<void(const fi_peer::Plan&, const fi_peer::PagedKv&, const void* q, void* out)> launch;
};

std::vector<PrefillVariant> prefill_variants(const PrefillShape& ps, const std::string& only,
                                             const std::vector<int>& qo_indptr, const PageLists& pages,
                                             const std::vector<int>& kv_lens, int* d_qo, int page, float scale,
                                             const pa::DeviceInfo& info, fi_peer::Workspace& ws) {
    std::vector<PrefillVariant> v;
    if (only.empty() || only == "flashinfer_prefill")
        v.push_back({"flashinfer_prefill",
                     [&, page]() {
                         fi_peer::Plan plan;
                         throw_if(fi_peer::prefill_plan(qo_indptr, pages.indptr, ps.B, ps.H, ps.Hkv, page, ws, &plan));
                         return plan;
                     },
                     [&, d_qo, scale](const fi_peer::Plan& plan, const fi_peer::PagedKv& kv, const void* q, void* out) {
                         throw_if(fi_peer::prefill_run(pa::DType::bf16, true, plan, ws, kv, q, d_qo, out, ps.H, scale, nullptr));
                     }});
    if ((only.empty() || only == "flashinfer_prefill_sm90") && sm90_why_not(info).empty()) {
#if defined(PA_FI_SM90_PREFILL)
        const int rows = qo_indptr.back();
        v.push_back({"flashinfer_prefill_sm90",
                     [&, page]() {
                         fi_peer::Plan plan;
                         throw_if(fi_peer::prefill_sm90_plan(qo_indptr, pages.indptr, kv_lens, ps.B, ps.H, ps.Hkv, page,
                                                             info.sms, ws, &plan));
                         return plan;
                     },
                     [&, rows, scale](const fi_peer::Plan& plan, const fi_peer::PagedKv& kv, const void* q, void* out) {
                         throw_if(fi_peer::prefill_sm90_run(pa::DType::bf16, plan, ws, kv, q, rows, out, ps.H, scale, nullptr));
                     }});
#endif
    }
    (void)kv_lens;
    return v;
}

std::vector<pa::ResultRow> bench_prefill(const pa::BenchSetup& setup, double mma_tflops, const PrefillShape& ps,
                                         uint64_t seed, const std::string& only, fi_peer::Workspace& ws) {
    const pa::DType t = pa::DType::bf16;
    const int D = 128, page = 16;
    const pa::DecodeShape cache_shape = pa::make_shape(ps.name, ps.H, ps.Hkv, std::vector<int>(ps.B, ps.T), D, page, t);
    const pa::DecodeProblem p = pa::make_decode_problem(cache_shape, seed);  // the cache and its table
    const size_t rows_total = static_cast<size_t>(ps.B) * ps.T;
    std::vector<uint16_t> q(rows_total * ps.H * D);
    pa::Rng rng(seed, 0x9e11);
    for (auto& x : q) x = pa::encode(t, rng.uniform(-3.0f, 3.0f));  // as the decode problems' q

    SampledRows sampled{p, q, ps.T, sample_rows(ps.B, ps.T, seed)};
    const std::vector<double> ref = pa::reference::softmax_decode(sampled, p.scale);

    PageLists pages(p.table, page);
    std::vector<int> qo_indptr(ps.B + 1);
    for (int b = 0; b <= ps.B; ++b) qo_indptr[b] = b * ps.T;
    pa::DeviceBuffer<int> d_qo(qo_indptr);
    const std::vector<PrefillVariant> variants = prefill_variants(
        ps, only, qo_indptr, pages, p.table.context_lens, d_qo.get(), page, static_cast<float>(p.scale), setup.info, ws);
    if (variants.empty()) return {};  // the one asked for is not available here (its "not run" line says why)

    // Copies of K, V and q for the L2-cold timing; copy 0 is the L2-hot one.
    const long long copy_bytes = static_cast<long long>(p.cache.k.size() + p.cache.v.size() + q.size()) * 2;
    const int copies = pa::cold_copies(copy_bytes, setup.info.l2_bytes);
    std::vector<pa::DeviceBuffer<uint16_t>> dk, dv, dq;
    dk.emplace_back(p.cache.k);
    dv.emplace_back(p.cache.v);
    dq.emplace_back(q);
    for (int c = 1; c < copies; ++c) {
        dk.emplace_back(dk[0].size());
        dk.back().copy_from(dk[0]);
        dv.emplace_back(dv[0].size());
        dv.back().copy_from(dv[0]);
        dq.emplace_back(dq[0].size());
        dq.back().copy_from(dq[0]);
    }
    pa::DeviceBuffer<uint16_t> out(q.size());
    auto check = [&]() {
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> all = out.download();
        std::vector<uint16_t> got;
        for (const auto& [b, i] : sampled.rows) {
            const size_t row = static_cast<size_t>(b) * ps.T + i;
            got.insert(got.end(), all.begin() + row * ps.H * D, all.begin() + (row + 1) * ps.H * D);
        }
        return pa::compare_output(got, ref, t);
    };

    // Causal FLOPs: row i of a sequence multiplies against i + 1 keys, for QK^T and for PV.
    const double pairs = static_cast<double>(ps.B) * ps.T * (ps.T + 1) / 2.0;
    const double flops = 4.0 * pairs * ps.H * D;
    const double bytes = 2.0 * (2.0 * rows_total * ps.H * D + 2.0 * rows_total * ps.Hkv * D) +
                         4.0 * (pages.indices.size() + pages.indptr.size() + pages.last_page_len.size() + qo_indptr.size());
    std::vector<pa::ResultRow> rows;
    // One variant after the other: each plans into the shared workspace, then is checked, timed
    // and checked again before the next one plans.
    for (const PrefillVariant& v : variants) {
        const fi_peer::Plan plan = v.plan();
        auto launch = [&](int c) {
            v.launch(plan, pages.view(dk[c].get(), dv[c].get(), ps.Hkv, page, D), dq[c].get(), out.get());
        };
        out.fill_bytes(0xff);
        launch(0);
        const pa::CheckResult before = check();
        const pa::Timing hot = pa::time_kernel([&](int) { launch(0); }, 1, setup.warmup, setup.iters);
        const pa::Timing cold = pa::time_kernel(launch, copies, setup.warmup, setup.iters);
        const pa::CheckResult after = check();  // the output of the last timed launch
        const bool pass = before.pass && after.pass;
        if (!pass)
            std::fprintf(stderr, "FAIL %s %s: %s\n", v.name.c_str(), ps.name.c_str(),
                         (before.pass ? after.message : before.message).c_str());
        for (int cold_run = 0; cold_run < 2; ++cold_run) {
            const pa::Timing& tm = cold_run ? cold : hot;
            pa::ResultRow r;
            r.gpu = setup.info.short_name;
            r.lesson = kLesson;
            r.variant = v.name;
            r.shape = ps.name;
            r.dtype = pa::dtype_name(t);
            r.B = ps.B;
            r.H = ps.H;
            r.Hkv = ps.Hkv;
            r.D = D;
            r.ctx = std::to_string(ps.T);
            r.block_size = page;
            r.l2 = cold_run ? "cold" : "hot";
            r.us_median = tm.us_median;
            r.us_min = tm.us_min;
            r.bytes = bytes;
            r.gbps = bytes / (tm.us_median * 1e-6) / 1e9;
            r.read_bw_gbps = setup.read_bw_gbps;
            r.pct_read_bw = 100.0 * *r.gbps / setup.read_bw_gbps;
            r.flops = flops;
            r.tflops = flops / (tm.us_median * 1e-6) / 1e12;
            r.mma_peak_tflops = mma_tflops;
            r.pct_mma_peak = 100.0 * *r.tflops / mma_tflops;
            r.check = pass ? "PASS" : "FAIL";
            r.rel_err = std::max(before.rel_err, after.rel_err);
            r.set_extra("ctas", std::to_string(plan.ctas));
            r.set_extra("fi_split_kv", plan.split_kv ? "1" : "0");
            r.set_extra("prefix", "0");
            rows.push_back(r);
        }
    }
    return rows;
}

void print_prefill_rows(const std::vector<pa::ResultRow>& rows) {
    pa::TextTable tt({"shape", "variant", "hot us", "cold us", "cold TFLOPS", "% bf16 peak", "check", "rel err"});
    for (size_t i = 0; i + 1 < rows.size(); i += 2)
        tt.add_row({rows[i].shape, rows[i].variant, pa::strf("%.1f", rows[i].us_median),
                    pa::strf("%.1f", rows[i + 1].us_median), pa::strf("%.1f", *rows[i + 1].tflops),
                    pa::strf("%.1f", *rows[i + 1].pct_mma_peak), rows[i + 1].check, pa::strf("%.1e", *rows[i + 1].rel_err)});
    tt.print();
}

std::string usage() {
    std::string u = pa::common_usage_line(kProgram);
    u += "FlashInfer's BatchDecode (flashinfer_decode), its tensor-core decode (flashinfer_decode_tc) and its causal\n"
         "BatchPrefill (flashinfer_prefill; flashinfer_prefill_sm90: its Hopper FA3-style backend, sm_90a builds on\n"
         "an sm_90 GPU) on this repository's paged cache: decode on Tables A, B and C, prefill on lesson 06's prompt\n"
         "shapes (";
    for (const auto& p : prefill_shapes()) u += p.name + (p.name == prefill_shapes().back().name ? "" : ", ");
    u += "). Rows: lesson `peer`.\n"
         "  --shape NAME     a decode catalogue shape or a prefill shape (repeatable)\n"
         "  --variant NAME   flashinfer_decode | flashinfer_decode_tc | flashinfer_prefill | flashinfer_prefill_sm90\n"
         "  --csv FILE  --iters N  --seed N\n";
    return u;
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<pa::LessonFlag> own = {
        {"--quick", false, "--quick          a few shapes (llama7b-B1-ctx1k, llama70b-B4-ctx2k, mqa-B16-ctx4k, "
                           "qwen1.5b-B1-ctx512, h8kv4-B32-ctx256, B32-T256-H8-Hkv4)", {}},
        {"--part", true, "--part decode|prefill   only the decode or only the prefill shapes", {}}};
    const pa::Flags f = pa::parse_flags_or_exit(argc, argv, usage(), own);
    const bool quick = f.has("--quick");
    const std::string part = f.has("--part") ? f.lesson.at("--part") : "";
    if (!part.empty() && part != "decode" && part != "prefill") {
        std::fprintf(stderr, "error: %s: --part takes decode or prefill, got '%s'\n", kProgram, part.c_str());
        return pa::kExitBadInput;
    }
    const std::set<std::string> variants = {"flashinfer_decode", "flashinfer_decode_tc", "flashinfer_prefill",
                                            "flashinfer_prefill_sm90"};
    if (!f.variant.empty() && !variants.count(f.variant)) {
        std::fprintf(stderr,
                     "error: %s: unknown variant '%s' (flashinfer_decode, flashinfer_decode_tc, flashinfer_prefill, "
                     "flashinfer_prefill_sm90)\n",
                     kProgram, f.variant.c_str());
        return pa::kExitBadInput;
    }
    if (f.explicit_shape()) {
        std::fprintf(stderr, "error: %s: give shapes by name (--shape); explicit --B/--ctx shapes are not offered\n", kProgram);
        return pa::kExitBadInput;
    }

    // Which shapes: --shape names, else the catalogue (or its --quick part).
    std::vector<pa::DecodeShape> decode;
    std::vector<PrefillShape> prefill;
    if (!f.shapes.empty()) {
        for (const auto& name : f.shapes) {
            bool found = false;
            for (const auto& p : prefill_shapes())
                if (p.name == name) prefill.push_back(p), found = true;
            if (!found) {
                const auto s = pa::find_shape(name);
                if (!s) {
                    std::fprintf(stderr, "error: %s: unknown shape '%s' (--help lists the prefill shapes; decode shapes are the lessons')\n",
                                 kProgram, name.c_str());
                    return pa::kExitBadInput;
                }
                decode.push_back(*s);
            }
        }
    } else {
        for (const auto& list : {pa::table_a(), pa::table_b(), pa::table_c()})
            for (const auto& s : list)
                if (!quick || peers::quick_shapes().count(s.name)) decode.push_back(s);
        for (const auto& p : prefill_shapes())
            if (!quick || peers::quick_shapes().count(p.name)) prefill.push_back(p);
    }
    if (part == "prefill" || f.variant == "flashinfer_prefill" || f.variant == "flashinfer_prefill_sm90") decode.clear();
    if (part == "decode" || f.variant == "flashinfer_decode" || f.variant == "flashinfer_decode_tc") prefill.clear();

    const pa::DeviceInfo info = pa::require_gpu(kProgram);
    try {
        if (info.cc() < 80) {
            std::printf("%s: FlashInfer's kernels here need sm_80 or newer; %s is sm_%d\n", kProgram, info.name.c_str(), info.cc());
            return pa::kExitNoGpu;
        }
        pa::BenchSetup setup;
        setup.info = info;
        setup.lesson = kLesson;
        setup.iters = f.iters;
        setup.read_bw_gbps = pa::measured_read_bandwidth_gbps(info);
        const double mma = prefill.empty() ? 0 : pa::measured_bf16_gemm_tflops();
        pa::print_run_header("FlashInfer peer (its BatchDecode / BatchPrefill on this repository's paged cache)", info,
                             setup.read_bw_gbps);
        if (mma > 0) std::printf("measured dense bf16 GEMM: %.0f TFLOP/s\n", mma);

        fi_peer::Workspace ws;
        std::vector<pa::ResultRow> drows, prows;
        std::vector<std::string> skipped;
        const std::string sm90_why = sm90_why_not(info);
        if (!prefill.empty() && !sm90_why.empty() && (f.variant.empty() || f.variant == "flashinfer_prefill_sm90"))
            skipped.push_back("flashinfer_prefill_sm90: " + sm90_why);
        int failures = 0;
        const size_t total = decode.size() + prefill.size();
        size_t done = 0;
        for (const auto& s : decode) {
            std::printf("[%zu/%zu] %s\n", ++done, total, s.name.c_str());
            std::fflush(stdout);
            auto r = bench_decode(setup, s, f.seed, f.variant, ws, &skipped);
            drows.insert(drows.end(), r.begin(), r.end());
        }
        for (const auto& ps : prefill) {
            std::printf("[%zu/%zu] %s\n", ++done, total, ps.name.c_str());
            std::fflush(stdout);
            auto r = bench_prefill(setup, mma, ps, f.seed, f.variant, ws);
            prows.insert(prows.end(), r.begin(), r.end());
        }
        ws.release();
        for (const auto& r : drows) failures += r.check == "FAIL" && r.l2 == "cold";
        for (const auto& r : prows) failures += r.check == "FAIL" && r.l2 == "cold";
        if (!drows.empty()) pa::print_decode_rows(drows, info, setup.read_bw_gbps);
        if (!prows.empty()) print_prefill_rows(prows);
        for (const auto& s : skipped) std::printf("not run: %s\n", s.c_str());
        std::vector<pa::ResultRow> rows = drows;
        rows.insert(rows.end(), prows.begin(), prows.end());
        pa::write_csv_or_exit(kProgram, f.csv, rows);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
        return 1;
    }
}
