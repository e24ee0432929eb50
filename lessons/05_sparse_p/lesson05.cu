// Lesson 05's instantiations, listed once (with_kernel, with_split_kernel,
// with_cluster_kernel), split-k's scratch, step 12's cluster plan, and the variants.
#include "lesson05.h"

#include <stdexcept>
#include <type_traits>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "smem_cap.h"
#include "sparsity.h"
#include "split_workspace.cuh"
#include "step1_gate.cuh"
#include "step2_k_ahead.cuh"
#include "step3_smem_pages.cuh"
#include "step4_l2_hints.cuh"
#include "step5_scores_in_slot.cuh"
#include "step6_bulk_rows.cuh"
#include "step7_dense.cuh"
#include "step8_zero_skip.cuh"
#include "step9_compact_atomic.cuh"
#include "step10_compact_ordered.cuh"
#include "step11_split_k_compact.cuh"
#include "step12_split_k_cluster.cuh"
#include "step13_branchless_gate.cuh"
#include "table.h"

namespace lesson05 {

namespace {

enum class Step { dense, zero_skip, compact_atomic, compact_ordered, branchless_gate };

// Steps 1-6, which build up to step 7 (dense): one sequence per CTA, no `B` argument; steps
// 1-4 run the 2-slot ring only, steps 5-6 any of the three layouts.
enum class Early { gate, k_ahead, smem_pages, l2_hints, scores_in_slot, bulk_rows };

// Which of gated_layout.cuh's three layouts a launch uses: Layout<1> (one CTA per SM, a
// 6-slot ring), Layout<2> (two per SM, 3 slots) or Layout<1, kSmallStages> (one per SM, 2
// slots: for GPUs with 99 KiB a CTA).
enum class Ring { one_per_sm, two_per_sm, small };

// Calls f(CTAS_PER_SM, STAGES) of `ring`, each a std::integral_constant; returns what f returns.
template <class F>
bool dispatch_ring(Ring ring, F&& f) {
    using std::integral_constant;
    switch (ring) {
        case Ring::one_per_sm: return f(integral_constant<int, 1>{}, integral_constant<int, default_stages(1)>{});
        case Ring::two_per_sm: return f(integral_constant<int, 2>{}, integral_constant<int, default_stages(2)>{});
        case Ring::small: return f(integral_constant<int, 1>{}, integral_constant<int, kSmallStages>{});
    }
    return false;
}

// Every single-pass instantiation: step x dtype x layout x sequences per CTA (D 128, 8
// heads per CTA; two sequences per CTA only at two CTAs per SM). Calls f(kernel, smem
// bytes) and returns true, or false when the combination was not built.
template <class F>
bool with_kernel(Step step, pa::DType t, Ring ring, int seqs, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_ring(ring, [&](auto c, auto st) {
            return pa::dispatch_int<1, 2>(seqs, [&](auto q) {
                constexpr int C = c.value, ST = st.value, S = q.value;
                if constexpr (C == 1 && S == 2) {
                    return false;
                } else {
                    const int smem = Layout<C, ST>::kSmemBytes;
                    switch (step) {
                        case Step::dense: f(dense_gated_kernel<T, C, S, ST>, smem); return true;
                        case Step::zero_skip: f(zero_skip_gated_kernel<T, C, S, ST>, smem); return true;
                        case Step::compact_atomic: f(compact_atomic_gated_kernel<T, C, S, ST>, smem); return true;
                        case Step::compact_ordered: f(compact_ordered_gated_kernel<T, C, S, ST>, smem); return true;
                        case Step::branchless_gate: f(branchless_gate_kernel<T, C, S, ST>, smem); return true;
                    }
                    return false;
                }
            });
        });
    });
}

// Every instantiation of steps 1-6 (steps 1-4: the 2-slot ring only). Calls f(kernel, smem
// bytes) and returns true, or false when the combination was not built.
template <class F>
bool with_early_kernel(Early step, pa::DType t, Ring ring, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_ring(ring, [&](auto c, auto st) {
            constexpr int C = c.value, ST = st.value;
            const int smem = Layout<C, ST>::kSmemBytes;
            if constexpr (C == 1 && ST == kSmallStages) {
                switch (step) {
                    case Early::gate: f(gate_kernel<T>, smem); return true;
                    case Early::k_ahead: f(k_ahead_kernel<T>, smem); return true;
                    case Early::smem_pages: f(smem_pages_kernel<T>, smem); return true;
                    case Early::l2_hints: f(l2_hints_kernel<T>, smem); return true;
                    default: break;
                }
            }
            switch (step) {
                case Early::scores_in_slot: f(scores_in_slot_kernel<T, C, ST>, smem); return true;
                case Early::bulk_rows: f(bulk_rows_kernel<T, C, ST>, smem); return true;
                default: return false;
            }
        });
    });
}

template <class F>
bool with_split_kernel(pa::DType t, Ring ring, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_ring(ring, [&](auto c, auto st) {
            f(split_k_compact_gated_kernel<T, c.value, st.value>, Layout<c.value, st.value>::kSmemBytes);
            return true;
        });
    });
}

template <class F>
bool with_cluster_kernel(pa::DType t, int ctas_per_sm, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<1, 2>(ctas_per_sm, [&](auto c) {
            f(split_k_cluster_gated_kernel<T, c.value>, Layout<c.value>::kSmemBytes);
            return true;
        });
    });
}

// Whether a layout of `smem` bytes fits a CTA of a GPU whose CTA may ask for `smem_optin`
// (pa::DeviceInfo, pa::current_max_smem_optin: PA_SMEM_CAP_KIB applied), with 1 KiB for the
// kernels' static arrays.
bool fits(int smem, int smem_optin) { return smem + 1024 <= smem_optin; }

// Two CTAs per SM (3-slot rings) when the grid is larger than the GPU, or when the
// one-per-SM ring does not fit the GPU's shared memory (A100); else one (a 6-slot ring).
int ctas_per_sm_for(long long ctas, int sms, int smem_optin) {
    if (ctas > sms) return 2;
    return Layout<1>::kSmemBytes + 1024 > smem_optin ? 2 : 1;
}

// The layout of a grid of `ctas` CTAs: ctas_per_sm_for's, or the 2-slot ring where the
// two-per-SM layout does not fit (99 KiB a CTA: sm_86, sm_89) or where `small` asks for it
// (the tests' _ring2 variants).
Ring ring_for(long long ctas, int sms, int smem_optin, bool small) {
    if (small || !fits(Layout<2>::kSmemBytes, smem_optin)) return Ring::small;
    return ctas_per_sm_for(ctas, sms, smem_optin) == 1 ? Ring::one_per_sm : Ring::two_per_sm;
}

// The single pass's sequences per CTA and layout: two sequences per CTA only in the
// two-per-SM layout (seqs_per_cta, with its page array), never in the 2-slot ring.
struct SinglePassPlan {
    int seqs;
    Ring ring;
    long long ctas;
};
SinglePassPlan single_pass_plan(int B, int Hkv, int max_ctx, int block_size, int sms, int smem_optin, bool small) {
    SinglePassPlan plan{};
    const bool ring2 = small || !fits(Layout<2>::kSmemBytes, smem_optin);  // ring_for's first test
    plan.seqs = ring2 ? 1 : seqs_per_cta(B, Hkv, max_ctx, block_size, sms, Layout<2>::kPageSlots);
    plan.ctas = static_cast<long long>((B + plan.seqs - 1) / plan.seqs) * Hkv;
    plan.ring = ring_for(plan.ctas, sms, smem_optin, small);
    return plan;
}

GateArgs gate_args(const pa::reference::GateParams& g) {
    GateArgs a;
    a.gamma = static_cast<float>(g.gamma);
    a.sigma = static_cast<float>(g.sigma);
    return a;
}

// Split-k's partials ([B, H, parts, D]) and merge counters ([B * Hkv]): one set per (device,
// stream), grown as needed (common/split_workspace.cuh); every launch leaves the counters at 0.
pa::SplitWorkspace g_workspace;

int partitions_of(int max_ctx, int partition_size) { return (max_ctx + partition_size - 1) / partition_size; }

// 0 for the rule (split_partition_size), else the fixed size.
int partition_size_for(int fixed, int B, int Hkv, int max_ctx, int sms) {
    return fixed > 0 ? fixed : split_partition_size(B, Hkv, max_ctx, sms);
}

// Step 12's plan for a batch: `fixed` tokens per partition, or (0) split_partition_size's,
// lengthened by whole tiles until the partitions of a (sequence, KV head) fit one cluster:
// at most 16, or 8 where 16 CTAs of the layout do not fit a GPC (pa::max_cluster_ctas).
// `cap` is that most, `parts` what the plan has: a fixed size may ask for more than `cap`,
// which the variant refuses.
struct ClusterPlan {
    int partition_size, parts, ctas_per_sm, cap;
};
ClusterPlan cluster_plan(pa::DType t, int fixed, int B, int Hkv, int max_ctx, int sms, int smem_optin) {
    const int tiles = (max_ctx + kTile - 1) / kTile;
    ClusterPlan plan{};
    for (const int cap : {16, 8}) {
        plan.cap = cap;
        plan.partition_size = partition_size_for(fixed, B, Hkv, max_ctx, sms);
        if (fixed == 0 && partitions_of(max_ctx, plan.partition_size) > cap)
            plan.partition_size = (tiles + cap - 1) / cap * kTile;
        plan.parts = partitions_of(max_ctx, plan.partition_size);
        plan.ctas_per_sm = ctas_per_sm_for(static_cast<long long>(B) * Hkv * plan.parts, sms, smem_optin);
        if (plan.parts <= 8) return plan;
        int most = 0;
        with_cluster_kernel(t, plan.ctas_per_sm, [&](auto kernel, int smem) {
            most = pa::max_cluster_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem);
        });
        if (plan.parts <= most) return plan;
    }
    return plan;
}

void launch_step(Step step, bool small, const pa::PagedDecodeArgs& a, const pa::reference::GateParams& g,
                 cudaStream_t stream) {
    const SinglePassPlan plan = single_pass_plan(a.B, a.Hkv, a.max_ctx, a.block_size, pa::current_sm_count(),
                                                 pa::current_max_smem_optin(), small);
    const dim3 grid(a.Hkv, (a.B + plan.seqs - 1) / plan.seqs);
    const bool built = with_kernel(step, a.dtype, plan.ring, plan.seqs, [&](auto kernel, int smem) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<grid, kThreads, smem, stream>>>(static_cast<T*>(a.out), static_cast<const T*>(a.q),
                                                 static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache),
                                                 a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
                                                 a.max_blocks_per_seq, a.scale, gate_args(g), a.B);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(pa::strf("lesson05: no kernel built for %s", pa::dtype_name(a.dtype)));
}

// Steps 1-4: the 2-slot ring; steps 5-6: ring_for's layout of a grid of B x Hkv CTAs.
Ring early_ring(Early step, long long ctas, int sms, int smem_optin) {
    if (step != Early::scores_in_slot && step != Early::bulk_rows) return Ring::small;
    return ring_for(ctas, sms, smem_optin, false);
}

void launch_early(Early step, const pa::PagedDecodeArgs& a, const pa::reference::GateParams& g, cudaStream_t stream) {
    const Ring ring = early_ring(step, static_cast<long long>(a.B) * a.Hkv, pa::current_sm_count(),
                                 pa::current_max_smem_optin());
    const dim3 grid(a.Hkv, a.B);
    const bool built = with_early_kernel(step, a.dtype, ring, [&](auto kernel, int smem) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<grid, kThreads, smem, stream>>>(static_cast<T*>(a.out), static_cast<const T*>(a.q),
                                                 static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache),
                                                 a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
                                                 a.max_blocks_per_seq, a.scale, gate_args(g));
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(pa::strf("lesson05: no kernel built for %s", pa::dtype_name(a.dtype)));
}

void launch_split(int fixed, bool small, const pa::PagedDecodeArgs& a, const pa::reference::GateParams& g,
                  cudaStream_t stream) {
    const int sms = pa::current_sm_count();
    const int P = partition_size_for(fixed, a.B, a.Hkv, a.max_ctx, sms);
    const int parts = partitions_of(a.max_ctx, P);
    const dim3 grid(a.Hkv, a.B, parts);
    pa::SplitBuffers& w = g_workspace.at_least(static_cast<size_t>(a.B) * a.H * parts * a.D, static_cast<size_t>(a.B) * a.Hkv, stream);
    const Ring ring = ring_for(static_cast<long long>(a.B) * a.Hkv * parts, sms, pa::current_max_smem_optin(), small);
    const bool built = with_split_kernel(a.dtype, ring, [&](auto kernel, int smem) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<grid, kThreads, smem, stream>>>(static_cast<T*>(a.out), static_cast<const T*>(a.q),
                                                 static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache),
                                                 a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
                                                 a.max_blocks_per_seq, a.scale, gate_args(g), P, w.floats.get(), parts,
                                                 w.counters.get());
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(pa::strf("lesson05: no split-k kernel built for %s", pa::dtype_name(a.dtype)));
}

void launch_cluster(int fixed, const pa::PagedDecodeArgs& a, const pa::reference::GateParams& g, cudaStream_t stream) {
    const ClusterPlan plan =
        cluster_plan(a.dtype, fixed, a.B, a.Hkv, a.max_ctx, pa::current_sm_count(), pa::current_max_smem_optin());
    if (plan.parts > plan.cap)
        throw std::invalid_argument(pa::strf("split_k_cluster: %d partitions, more than the %d CTAs a cluster holds here",
                                             plan.parts, plan.cap));
    const bool built = with_cluster_kernel(a.dtype, plan.ctas_per_sm, [&](auto kernel, int smem) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        // the partitions of one (sequence, KV head) a cluster
        pa::ClusterLaunch cl(dim3(a.Hkv, a.B, plan.parts), dim3(kThreads), smem, stream, dim3(1, 1, plan.parts));
        cl.cfg.numAttrs = plan.parts > 1 ? 1 : 0;  // one partition merges nothing: no cluster
        CUDA_CHECK(cudaLaunchKernelEx(&cl.cfg, kernel, static_cast<T*>(a.out), static_cast<const T*>(a.q),
                                      static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache), a.block_table,
                                      a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size, a.max_blocks_per_seq, a.scale,
                                      gate_args(g), plan.partition_size));
    });
    if (!built) throw pa::CudaError(pa::strf("lesson05: no split-k cluster kernel built for %s", pa::dtype_name(a.dtype)));
}

template <class WithKernel>
pa::LaunchGeometry geometry_of(WithKernel&& with, long long ctas, int partitions) {
    pa::LaunchGeometry g;
    with([&](auto kernel, int smem) {
        const void* k = reinterpret_cast<const void*>(kernel);
        pa::opt_in_max_dynamic_smem(k);
        g.ctas = ctas;
        g.threads = kThreads;
        g.smem_bytes = smem;
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(k), g.threads, g.smem_bytes);
    });
    g.partitions = partitions;
    return g;
}

const char* step_name(Step s) {
    switch (s) {
        case Step::dense: return "dense";
        case Step::zero_skip: return "zero_skip";
        case Step::compact_atomic: return "compact_atomic";
        case Step::compact_ordered: return "compact_ordered";
        case Step::branchless_gate: return "branchless_gate";
    }
    return "?";
}

const char* early_name(Early s) {
    switch (s) {
        case Early::gate: return "gate";
        case Early::k_ahead: return "k_ahead";
        case Early::smem_pages: return "smem_pages";
        case Early::l2_hints: return "l2_hints";
        case Early::scores_in_slot: return "scores_in_slot";
        case Early::bulk_rows: return "bulk_rows";
    }
    return "?";
}

pa::DecodeVariant early_variant(Early step, const Gate& gate) {
    pa::DecodeVariant v;
    v.name = early_name(step);
    v.why_not = [](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return why_not(s, info); };
    v.launch = [step, gate](const pa::PagedDecodeArgs& a, cudaStream_t st) { launch_early(step, a, *gate, st); };
    v.geometry = [step](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const long long ctas = static_cast<long long>(s.B) * s.Hkv;
        const Ring ring = early_ring(step, ctas, info.sms, info.smem_per_block_optin);
        return geometry_of([&](auto f) { with_early_kernel(step, s.dtype, ring, f); }, ctas, 1);
    };
    return v;
}

// The suffix of a variant forced onto the 2-slot ring.
const char* kRing2Suffix = "_ring2";

pa::DecodeVariant step_variant(Step step, const Gate& gate, bool small = false) {
    pa::DecodeVariant v;
    v.name = std::string(step_name(step)) + (small ? kRing2Suffix : "");
    v.why_not = [](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return why_not(s, info); };
    v.launch = [step, small, gate](const pa::PagedDecodeArgs& a, cudaStream_t st) { launch_step(step, small, a, *gate, st); };
    v.geometry = [step, small](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const SinglePassPlan plan =
            single_pass_plan(s.B, s.Hkv, s.max_ctx(), s.block_size, info.sms, info.smem_per_block_optin, small);
        return geometry_of([&](auto f) { with_kernel(step, s.dtype, plan.ring, plan.seqs, f); }, plan.ctas, 1);
    };
    return v;
}

}  // namespace

Gate make_gate(double sigma, double gamma) {
    pa::reference::GateParams g;
    g.sigma = sigma;
    g.gamma = gamma;
    pa::reference::validate_gate(g);
    return std::make_shared<pa::reference::GateParams>(g);
}

int seqs_per_cta_for(const pa::DecodeShape& s, int sms) {
    return single_pass_plan(s.B, s.Hkv, s.max_ctx(), s.block_size, sms, pa::current_max_smem_optin(), false).seqs;
}

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    if (s.D != kHeadSize) return pa::strf("lesson 05's kernels are built for D %d only (got D %d)", kHeadSize, s.D);
    if (s.group() > kHeads)
        return pa::strf("a lesson 05 CTA serves at most %d query heads (one mma column block); group %d needs more",
                        kHeads, s.group());
    const int need = Layout<1, kSmallStages>::kSmemBytes;  // the smallest of the three layouts
    if (info.smem_per_block_optin > 0 && !fits(need, info.smem_per_block_optin))
        return pa::strf("stages K/V through %d KiB of shared memory per CTA; this GPU (%s) gives %d KiB%s", need / 1024,
                        info.name.c_str(), info.smem_per_block_optin / 1024, pa::smem_cap_note().c_str());
    return "";
}

pa::DecodeVariant split_k_variant(int partition_size, const Gate& gate, bool small_ring) {
    if (partition_size < 0 || partition_size % kTile != 0)
        throw std::invalid_argument(pa::strf("split_k_compact: partition size %d is not a multiple of %d tokens",
                                             partition_size, kTile));
    pa::DecodeVariant v;
    v.name = (partition_size > 0 ? pa::strf("split_k_compact_%d", partition_size) : std::string("split_k_compact")) +
             (small_ring ? kRing2Suffix : "");
    v.why_not = [](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return why_not(s, info); };
    v.launch = [partition_size, small_ring, gate](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        launch_split(partition_size, small_ring, a, *gate, st);
    };
    v.geometry = [partition_size, small_ring](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const int P = partition_size_for(partition_size, s.B, s.Hkv, s.max_ctx(), info.sms);
        const int parts = partitions_of(s.max_ctx(), P);
        const long long ctas = static_cast<long long>(s.B) * s.Hkv * parts;
        const Ring ring = ring_for(ctas, info.sms, info.smem_per_block_optin, small_ring);
        return geometry_of([&](auto f) { with_split_kernel(s.dtype, ring, f); }, ctas, parts);
    };
    return v;
}

int partitions_for(const std::string& variant_name, const pa::DecodeShape& s, int sms) {
    if (variant_name == "split_k_compact") return partitions_of(s.max_ctx(), split_partition_size(s.B, s.Hkv, s.max_ctx(), sms));
    if (variant_name == "split_k_cluster")
        return cluster_plan(s.dtype, 0, s.B, s.Hkv, s.max_ctx(), sms, pa::current_max_smem_optin()).parts;
    return 1;
}

pa::DecodeVariant split_k_cluster_variant(int partition_size, const Gate& gate) {
    if (partition_size < 0 || partition_size % kTile != 0)
        throw std::invalid_argument(pa::strf("split_k_cluster: partition size %d is not a multiple of %d tokens",
                                             partition_size, kTile));
    pa::DecodeVariant v;
    v.name = partition_size > 0 ? pa::strf("split_k_cluster_%d", partition_size) : "split_k_cluster";
    v.why_not = [partition_size](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const std::string why = why_not(s, info);
        if (!why.empty()) return why;
        std::string sm90;
        with_cluster_kernel(s.dtype, 2, [&](auto kernel, int) {
            sm90 = pa::sm90_code_why_not(reinterpret_cast<const void*>(kernel), info,
                                         "split_k_cluster merges in a thread-block cluster", "split_k_compact runs here");
        });
        if (!sm90.empty()) return sm90;
        // an sm_90 GPU whose shared memory is capped (PA_SMEM_CAP_KIB): step 12 has no 2-slot ring build
        const int need = Layout<2>::kSmemBytes;
        if (info.smem_per_block_optin > 0 && !fits(need, info.smem_per_block_optin))
            return pa::strf("split_k_cluster stages K/V through %d KiB of shared memory per CTA, as every sm_90 GPU "
                            "gives; this GPU (%s) gives %d KiB%s (split_k_compact runs here)",
                            need / 1024, info.name.c_str(), info.smem_per_block_optin / 1024,
                            pa::smem_cap_note().c_str());
        const ClusterPlan plan =
            cluster_plan(s.dtype, partition_size, s.B, s.Hkv, s.max_ctx(), info.sms, info.smem_per_block_optin);
        if (plan.parts > plan.cap)
            return pa::strf("split_k_cluster: partitions of %d tokens make %d of them, more than the %d CTAs a cluster "
                            "holds here", plan.partition_size, plan.parts, plan.cap);
        return std::string();
    };
    v.launch = [partition_size, gate](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        launch_cluster(partition_size, a, *gate, st);
    };
    v.geometry = [partition_size](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const ClusterPlan plan =
            cluster_plan(s.dtype, partition_size, s.B, s.Hkv, s.max_ctx(), info.sms, info.smem_per_block_optin);
        const long long ctas = static_cast<long long>(s.B) * s.Hkv * plan.parts;
        return geometry_of([&](auto f) { with_cluster_kernel(s.dtype, plan.ctas_per_sm, f); }, ctas, plan.parts);
    };
    return v;
}

std::vector<pa::DecodeVariant> variants(const Gate& gate) {
    return {early_variant(Early::gate, gate),           early_variant(Early::k_ahead, gate),
            early_variant(Early::smem_pages, gate),     early_variant(Early::l2_hints, gate),
            early_variant(Early::scores_in_slot, gate), early_variant(Early::bulk_rows, gate),
            step_variant(Step::dense, gate),          step_variant(Step::zero_skip, gate),
            step_variant(Step::compact_atomic, gate), step_variant(Step::compact_ordered, gate),
            split_k_variant(0, gate),                 split_k_cluster_variant(0, gate),
            step_variant(Step::branchless_gate, gate)};
}

std::vector<pa::DecodeVariant> small_ring_variants(const Gate& gate) {
    return {step_variant(Step::dense, gate, true),          step_variant(Step::zero_skip, gate, true),
            step_variant(Step::compact_atomic, gate, true), step_variant(Step::compact_ordered, gate, true),
            split_k_variant(0, gate, true),                step_variant(Step::branchless_gate, gate, true)};
}

pa::DecodeVariant variant(const std::string& name, const Gate& gate) {
    for (auto& v : variants(gate))
        if (v.name == name) return v;
    throw std::invalid_argument("lesson05: no variant named '" + name + "'");
}

}  // namespace lesson05
