// Lesson 06's host side on the GPU: the batch on the device, the variants, step 1 (prefill as
// decode, through lesson 03), and the dispatch to each step's launcher.
#include "lesson06.h"

#include <algorithm>
#include <stdexcept>

#include "cuda_check.cuh"
#include "decode_driver.cuh"
#include "split_k.h"
#include "steps.cuh"
#include "table.h"
#if PA_HAVE_LESSON05
#include "lesson05.h"
#endif

namespace lesson06 {

const char* method_name(Method m) {
    switch (m) {
        case Method::as_decode: return "as_decode";
        case Method::mma_sync: return "mma_sync";
        case Method::wgmma: return "wgmma";
        case Method::wgmma_swizzle: return "wgmma_swizzle";
        case Method::wgmma_tma: return "wgmma_tma";
        case Method::wgmma_producer: return "wgmma_producer";
        case Method::wgmma_setmaxnreg: return "wgmma_setmaxnreg";
        case Method::wgmma_overlap: return "wgmma_overlap";
        case Method::wgmma_ws: return "wgmma_ws";
        case Method::wgmma_persistent: return "wgmma_persistent";
        case Method::wgmma_fast_exp2: return "wgmma_fast_exp2";
        case Method::wgmma_early_start: return "wgmma_early_start";
        case Method::wgmma_lazy_rescale: return "wgmma_lazy_rescale";
        case Method::wgmma_diagonal_mask: return "wgmma_diagonal_mask";
        case Method::wgmma_paired_stores: return "wgmma_paired_stores";
        case Method::wgmma_q_registers: return "wgmma_q_registers";
        case Method::wgmma_work_ahead: return "wgmma_work_ahead";
        case Method::wgmma_tma_store: return "wgmma_tma_store";
        case Method::wgmma_folded_gate: return "wgmma_folded_gate";
        case Method::wgmma_tree_max: return "wgmma_tree_max";
        case Method::wgmma_v_pages: return "wgmma_v_pages";
    }
    return "?";
}

DevicePrefillProblem::DevicePrefillProblem(const PrefillProblem& p, int copies)
    : shape_(p.shape),
      max_blocks_per_seq_(p.table.max_blocks_per_seq),
      num_blocks_(p.table.num_blocks),
      scale_(static_cast<float>(p.scale)),
      q_(p.q),
      out_(p.q.size()),
      block_table_(p.table.table),
      prefix_(p.shape.prefix_lens),
      new_(p.shape.new_lens),
      q_start_(p.q_start),
      tiles64_(query_tiles(p.shape, 64, 64)),
      tiles128_(query_tiles(p.shape, 128, 128)) {
    k_ = pa::device_copies(p.cache.k, copies);
    v_ = pa::device_copies(p.cache.v, copies);
    const pa::DecodeShape d = as_decode_shape(p.shape);
    decode_ctx_host_ = d.ctx;
    decode_max_ctx_ = d.max_ctx();
    decode_ctx_.upload(decode_ctx_host_);
    decode_table_.upload(as_decode_block_table(p));
}

PrefillArgs DevicePrefillProblem::args(const GateSetting& g, int copy) {
    PrefillArgs a;
    a.out = out_.get();
    a.q = q_.get();
    a.k_cache = k_[copy].get();
    a.v_cache = v_[copy].get();
    a.block_table = block_table_.get();
    a.prefix_lens = prefix_.get();
    a.new_lens = new_.get();
    a.q_start = q_start_.get();
    a.tiles64 = tiles64_.get();
    a.tiles128 = tiles128_.get();
    a.num_tiles64 = static_cast<int>(tiles64_.size());
    a.num_tiles128 = static_cast<int>(tiles128_.size());
    a.B = shape_.B();
    a.H = shape_.H;
    a.Hkv = shape_.Hkv;
    a.max_blocks_per_seq = max_blocks_per_seq_;
    a.num_blocks = num_blocks_;
    a.total_new = shape_.total_new();
    a.scale = scale_;
    a.gamma = static_cast<float>(g.gamma);
    a.sigma = static_cast<float>(g.sigma);
    pa::PagedDecodeArgs& d = a.as_decode;  // row r of q is decode "sequence" r
    d.out = a.out;
    d.q = a.q;
    d.k_cache = a.k_cache;
    d.v_cache = a.v_cache;
    d.block_table = decode_table_.get();
    d.context_lens = decode_ctx_.get();
    d.context_lens_host = decode_ctx_host_.data();
    d.B = static_cast<int>(a.total_new);
    d.H = a.H;
    d.Hkv = a.Hkv;
    d.D = kHeadSize;
    d.block_size = kPageSize;
    d.max_blocks_per_seq = max_blocks_per_seq_;
    d.max_ctx = decode_max_ctx_;
    d.scale = scale_;
    d.dtype = pa::DType::bf16;
    return a;
}

namespace {

// Step 1's decode for the softmax: lesson 03's automatic choice between lesson 02's single pass
// and split-k (the decodes are many and short, so it mostly picks the single pass).
const pa::DecodeVariant& softmax_decode() {
    static const pa::DecodeVariant v = lesson03::auto_variant();
    return v;
}

#if PA_HAVE_LESSON05
// Step 1 of the gate: lesson 05's last step (split-k with compacted P; one partition when the
// many short decodes already fill the GPU). Its gate is read at each launch.
lesson05::Gate& decode_gate() {
    static lesson05::Gate g = lesson05::make_gate(GateSetting{}.sigma, GateSetting{}.gamma);
    return g;
}
const pa::DecodeVariant& gated_decode() {
    static const pa::DecodeVariant v = lesson05::split_k_variant(0, decode_gate());
    return v;
}
#else
const char* kNoGatedDecode =
    "needs lesson 05's gated decode kernel (lessons/05_sparse_p), which this build does not have";
#endif

const pa::DecodeVariant& decode_of(Policy p) {
#if PA_HAVE_LESSON05
    if (p == Policy::gate) return gated_decode();
#endif
    (void)p;
    return softmax_decode();
}

}  // namespace

std::vector<PrefillVariant> all_variants() {
    std::vector<PrefillVariant> out;
    for (Method m : {Method::as_decode, Method::mma_sync, Method::wgmma, Method::wgmma_swizzle, Method::wgmma_tma,
                     Method::wgmma_producer, Method::wgmma_setmaxnreg, Method::wgmma_overlap, Method::wgmma_ws,
                     Method::wgmma_persistent, Method::wgmma_fast_exp2,
                     Method::wgmma_early_start, Method::wgmma_lazy_rescale, Method::wgmma_diagonal_mask,
                     Method::wgmma_paired_stores, Method::wgmma_q_registers,
                     Method::wgmma_work_ahead, Method::wgmma_tma_store, Method::wgmma_folded_gate,
                     Method::wgmma_tree_max, Method::wgmma_v_pages})
        for (Policy p : {Policy::softmax, Policy::gate}) {
            PrefillVariant v;
            v.name = std::string(method_name(m)) + "_" + policy_name(p);
            v.method = m;
            v.policy = p;
            const bool hopper = m != Method::as_decode && m != Method::mma_sync;
            v.min_cc = hopper ? 90 : 80;
            v.needs = !hopper                       ? "sm_80"
                      : m <= Method::wgmma_swizzle  ? "sm_90a (wgmma)"
                      : m <= Method::wgmma_producer ? "sm_90a (wgmma, TMA)"
                                                    : "sm_90a (wgmma, TMA, setmaxnreg)";
#if !PA_HAVE_LESSON05
            if (m == Method::as_decode && p == Policy::gate) v.not_built = kNoGatedDecode;
#endif
#if !PA_BUILT_SM90A
            if (hopper) v.not_built = "not built: this build's CUDA architectures do not include 90a";
#endif
            out.push_back(v);
        }
    return out;
}

std::string why_not(const PrefillVariant& v, const PrefillShape& s, const pa::DeviceInfo& info) {
    if (!v.not_built.empty()) return v.name + ": " + v.not_built;
    if (info.cc() < v.min_cc)
        return v.name + ": unavailable on " + info.name + " (sm_" + std::to_string(info.cc()) + "): needs " + v.needs;
    try {
        validate_prefill_shape(s);
    } catch (const std::exception& e) {
        return e.what();
    }
    if (v.method == Method::as_decode) {
        const std::string w = decode_of(v.policy).why_not(as_decode_shape(s), info);
        return w.empty() ? w : v.name + (v.policy == Policy::gate ? " (lesson 05's decode): " : " (lesson 03's decode): ") + w;
    }
    // The steps' tiles live in shared memory: a GPU (or a PA_SMEM_CAP_KIB) that gives a CTA less
    // refuses the step by name instead of failing its launch.
    const int need = geometry(v, s).smem_bytes;
    if (info.smem_per_block_optin > 0 && need > info.smem_per_block_optin)
        return v.name + pa::strf(": stages its tiles through %d KiB of shared memory per CTA; this GPU (%s) gives %d KiB",
                                 (need + 1023) / 1024, info.name.c_str(), info.smem_per_block_optin / 1024);
    return "";
}

void launch(const PrefillVariant& v, const PrefillArgs& a, cudaStream_t stream) {
    if (!v.not_built.empty()) throw pa::CudaError(v.name + ": " + v.not_built);
    switch (v.method) {
        case Method::as_decode:
#if PA_HAVE_LESSON05
            if (v.policy == Policy::gate) {
                decode_gate()->sigma = a.sigma;
                decode_gate()->gamma = a.gamma;
            }
#endif
            decode_of(v.policy).launch(a.as_decode, stream);
            return;
        case Method::mma_sync:
            launch_mma_sync(a, v.policy, stream);
            return;
#if PA_BUILT_SM90A
        case Method::wgmma:
            launch_wgmma(a, v.policy, stream);
            return;
        case Method::wgmma_swizzle:
            launch_wgmma_swizzle(a, v.policy, stream);
            return;
        case Method::wgmma_tma:
            launch_wgmma_tma(a, v.policy, stream);
            return;
        case Method::wgmma_producer:
            launch_wgmma_producer(a, v.policy, stream);
            return;
        case Method::wgmma_setmaxnreg:
            launch_wgmma_setmaxnreg(a, v.policy, stream);
            return;
        case Method::wgmma_overlap:
            launch_wgmma_overlap(a, v.policy, stream);
            return;
        case Method::wgmma_ws:
            launch_wgmma_ws(a, v.policy, stream);
            return;
        case Method::wgmma_persistent:
            launch_wgmma_persistent(a, v.policy, stream);
            return;
        case Method::wgmma_fast_exp2:
            launch_wgmma_fast_exp2(a, v.policy, stream);
            return;
        case Method::wgmma_early_start:
            launch_wgmma_early_start(a, v.policy, stream);
            return;
        case Method::wgmma_lazy_rescale:
            launch_wgmma_lazy_rescale(a, v.policy, stream);
            return;
        case Method::wgmma_diagonal_mask:
            launch_wgmma_diagonal_mask(a, v.policy, stream);
            return;
        case Method::wgmma_paired_stores:
            launch_wgmma_paired_stores(a, v.policy, stream);
            return;
        case Method::wgmma_q_registers:
            launch_wgmma_q_registers(a, v.policy, stream);
            return;
        case Method::wgmma_work_ahead:
            launch_wgmma_work_ahead(a, v.policy, stream);
            return;
        case Method::wgmma_tma_store:
            launch_wgmma_tma_store(a, v.policy, stream);
            return;
        case Method::wgmma_folded_gate:
            launch_wgmma_folded_gate(a, v.policy, stream);
            return;
        case Method::wgmma_tree_max:
            launch_wgmma_tree_max(a, v.policy, stream);
            return;
        case Method::wgmma_v_pages:
            launch_wgmma_v_pages(a, v.policy, stream);
            return;
#else
        default:
            break;
#endif
    }
    throw pa::CudaError(v.name + ": not built into this program");
}

Geometry geometry(const PrefillVariant& v, const PrefillShape& s) {
    switch (v.method) {
        case Method::as_decode: {
            const pa::LaunchGeometry g = decode_of(v.policy).geometry(as_decode_shape(s), pa::current_device_info());
            Geometry out;
            out.ctas = g.ctas;
            out.threads = g.threads;
            out.smem_bytes = g.smem_bytes;
            out.ctas_per_sm = g.ctas_per_sm;
            return out;
        }
        case Method::mma_sync: return geometry_mma_sync(s);
#if PA_BUILT_SM90A
        case Method::wgmma: return geometry_wgmma(s);
        case Method::wgmma_swizzle: return geometry_wgmma_swizzle(s);
        case Method::wgmma_tma: return geometry_wgmma_tma(s);
        case Method::wgmma_producer: return geometry_wgmma_producer(s);
        case Method::wgmma_setmaxnreg: return geometry_wgmma_setmaxnreg(s);
        case Method::wgmma_overlap: return geometry_wgmma_overlap(s);
        case Method::wgmma_ws: return geometry_wgmma_ws(s);
        case Method::wgmma_persistent: return geometry_wgmma_persistent(s);
        case Method::wgmma_fast_exp2: return geometry_wgmma_fast_exp2(s);
        case Method::wgmma_early_start: return geometry_wgmma_early_start(s);
        case Method::wgmma_lazy_rescale: return geometry_wgmma_lazy_rescale(s);
        case Method::wgmma_diagonal_mask: return geometry_wgmma_diagonal_mask(s);
        case Method::wgmma_paired_stores: return geometry_wgmma_paired_stores(s);
        case Method::wgmma_q_registers: return geometry_wgmma_q_registers(s);
        case Method::wgmma_work_ahead: return geometry_wgmma_work_ahead(s);
        case Method::wgmma_tma_store: return geometry_wgmma_tma_store(s);
        case Method::wgmma_folded_gate: return geometry_wgmma_folded_gate(s);
        case Method::wgmma_tree_max: return geometry_wgmma_tree_max(s);
        case Method::wgmma_v_pages: return geometry_wgmma_v_pages(s);
#else
        default: break;
#endif
    }
    return Geometry{};
}

std::vector<PrefillShape> check_shapes() {
    return {
        // one token, MHA
        make_mixed_prefill_shape("check-B1-H2-Hkv2-one-token", 2, 2, {1}, {0}),
        // group 2: prompts of 1 .. 300 tokens, prefixes 0 and not multiples of 16
        make_mixed_prefill_shape("check-B6-H8-Hkv4-mixed", 8, 4, {1, 17, 300, 64, 129, 200}, {0, 5, 0, 37, 16, 123}),
        // group 1: a long prefix, a 128-token boundary, a partial last page after a full tile
        make_mixed_prefill_shape("check-B3-H4-Hkv4-prefix", 4, 4, {128, 33, 255}, {300, 0, 129}),
        // group 8: tiles that straddle the diagonal at odd offsets
        make_mixed_prefill_shape("check-B3-H16-Hkv2-group8", 16, 2, {128, 255, 7}, {1, 100, 1000}),
    };
}

std::vector<PrefillShape> bench_shapes() {
    return {
        make_prefill_shape(32, 256, 8, 4, 0),     // the post's shape
        make_prefill_shape(16, 1024, 8, 4, 0),
        make_prefill_shape(16, 1024, 8, 4, 1024),  // chunked prefill: the second 1k chunk of a 2k prompt
        make_prefill_shape(4, 4096, 32, 8, 0),
        make_prefill_shape(4, 4096, 32, 8, 1024),
        make_prefill_shape(1, 8192, 32, 8, 0),
    };
}

}  // namespace lesson06
