// Lesson 03's instantiations, listed once (with_kernel), its scratch, and its launchers.
#include "split_k.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "lesson02.h"
#include "split_steps.h"
#include "step3_tensor_cores.cuh"
#include "step4_longest_first.cuh"
#include "step5_unit_copies.cuh"
#include "step6_head_rows.cuh"
#include "step7_flat_merge.cuh"
#include "step8_cluster_merge.cuh"
#include "split_workspace.cuh"
#include "table.h"

namespace lesson03 {

namespace {

// The tensor-core step whose kernel runs a plan without head rows: step 5 with unit copies,
// step 4 with an order table or even splits, else step 3.
int partition_step(const SplitPlan& p) { return p.units ? 5 : (p.longest_first || p.splits > 0) ? 4 : 3; }

// Every instantiation of steps 3 to 5: dtype x D {64, 128, 256} x heads per CTA {8, 16, 32} x
// fused (step 5: with UNITS only; UNITS = false is step 4's kernel), with the layout
// plan_launch takes: two CTAs per SM for 8 heads, one for 16 and 32. Calls f(kernel, smem
// bytes, step) and returns true, or false when the combination was not built.
template <bool FUSED, class F>
bool with_partition_kernel(pa::DType t, int D, int heads, int ctas_per_sm, int step, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<8, 16, 32>(heads, [&](auto n) {
                return pa::dispatch_int<1, 2>(ctas_per_sm, [&](auto c) {
                    return pa::dispatch_int<3, 4, 5>(step, [&](auto st) {
                        constexpr int kN = n.value, kC = c.value;
                        if constexpr ((kC == 2) != (kN == 8)) {
                            return false;
                        } else {
                            constexpr int kD = d.value;
                            constexpr int kSmem = MmaLayout<kD, kN, kC>::kSmemBytes;
                            if constexpr (st.value == 3) f(tensor_core_partitions_kernel<T, kD, kN, kC, FUSED>, kSmem, st);
                            else if constexpr (st.value == 4) f(longest_first_kernel<T, kD, kN, kC, FUSED>, kSmem, st);
                            else f(split_k_partition_kernel<T, kD, kN, kC, FUSED, true>, kSmem, st);
                            return true;
                        }
                    });
                });
            });
        });
    });
}

// Every head-row kernel (step 6; flat: step 7's flat merge): dtype x D {64, 128} x rows {16, 32} x
// fused x units (one CTA per SM).
template <bool FUSED, class F>
bool with_head_rows_kernel(pa::DType t, int D, int rows, bool units, bool flat, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128>(D, [&](auto d) {
            return pa::dispatch_int<16, 32>(rows, [&](auto r) {
                return pa::dispatch_int<0, 1>(units ? 1 : 0, [&](auto u) {
                    constexpr int kSmem = HeadRowLayout<d.value, r.value>::kSmemBytes;
                    if (flat)
                        f(flat_merge_kernel<T, d.value, r.value, FUSED, u.value == 1>, kSmem, std::integral_constant<int, 7>{});
                    else
                        f(split_k_head_rows_kernel<T, d.value, r.value, FUSED, u.value == 1>, kSmem,
                          std::integral_constant<int, 6>{});
                    return true;
                });
            });
        });
    });
}

// Every cluster-merge kernel (step 8): dtype x D {64, 128} x rows {16, 32} x units x the
// partitions it has registers for (2, or 4 for 3 and 4).
template <class F>
bool with_cluster_kernel(pa::DType t, int D, int rows, bool units, int partitions, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128>(D, [&](auto d) {
            return pa::dispatch_int<16, 32>(rows, [&](auto r) {
                return pa::dispatch_int<0, 1>(units ? 1 : 0, [&](auto u) {
                    return pa::dispatch_int<2, 4>(partitions <= 2 ? 2 : 4, [&](auto np) {
                        f(cluster_merge_kernel<T, d.value, r.value, u.value == 1, np.value>,
                          HeadRowLayout<d.value, r.value>::kSmemBytes, std::integral_constant<int, 8>{});
                        return true;
                    });
                });
            });
        });
    });
}

template <class F>
bool with_reduce_kernel(pa::DType t, int D, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            f(split_k_reduce_kernel<T, d.value>);
            return true;
        });
    });
}

int heads_per_cta(int group) {
    for (int g : {8, 16, 32})
        if (group <= g) return g;
    return 0;
}

// The head-row kernel's rows: the group rounded up to 16 or 32 (0: a group it does not take).
int head_rows_of(int group) {
    if (group <= 8 || group > 32) return 0;
    return group <= 16 ? 16 : 32;
}

// The layout: for one 8-head column block, always lesson 02's two-CTAs-per-SM layout (a
// 3-slot ring, half the shared memory): a partition is a few tiles long, so a deeper ring
// buys nothing, and a second CTA on the SM hides each partition's start-up. 16 or 32 heads
// have only the one-per-SM layout.
struct Launch {
    int heads = 0, ctas_per_sm = 1, partitions = 0;
    dim3 grid;
};

Launch plan_launch(const SplitPlan& p, int B, int H, int Hkv, int partitions) {
    Launch l;
    l.heads = p.head_rows ? head_rows_of(H / Hkv) : heads_per_cta(H / Hkv);
    l.partitions = partitions;
    l.ctas_per_sm = !p.head_rows && l.heads == 8 ? 2 : 1;
    l.grid = dim3(Hkv, B, partitions);
    return l;
}

// The plan's kernel (steps 3 to 8) for a launch: calls f(kernel, smem bytes, its step as an
// integral_constant); false when that combination was not built.
template <bool FUSED, class F>
bool with_plan_kernel(const SplitPlan& p, pa::DType t, int D, const Launch& l, F&& f) {
    if (p.cluster) return l.heads != 0 && with_cluster_kernel(t, D, l.heads, p.units, l.partitions, f);
    if (p.head_rows) return l.heads != 0 && with_head_rows_kernel<FUSED>(t, D, l.heads, p.units, p.flat_merge, f);
    return with_partition_kernel<FUSED>(t, D, l.heads, l.ctas_per_sm, partition_step(p), f);
}

size_t plan_smem(const SplitPlan& p, pa::DType t, int D, const Launch& l) {
    size_t smem = 0;
    with_plan_kernel<false>(p, t, D, l, [&](auto, int bytes, auto) { smem = static_cast<size_t>(bytes); });
    return smem;
}

// Scratch (m, l, acc back to back) and the fused merge's counters ([B * Hkv]): one set per
// (device, stream), grown as needed (common/split_workspace.cuh); every fused launch leaves the counters at 0.
pa::SplitWorkspace g_workspace;

SplitScratch scratch_in(pa::SplitBuffers& w, int B, int H, int partitions) {
    const size_t rows = static_cast<size_t>(B) * H * partitions;
    SplitScratch s;
    s.m = w.floats.get();
    s.l = s.m + rows;
    s.acc = s.l + rows;
    s.max_partitions = partitions;
    return s;
}

// Longest-first order tables ([partitions][B] cells, int2), one per (device, stream), planned
// on the host from the batch's lengths (B x partitions cells). A launch over the lengths,
// plan and grid of the stream's last one reuses its table: no sort, no copy. A decode step
// whose lengths moved pays one sort; the table is uploaded only when the order itself
// changed, which lengths that grow by a token a step do only when a partition fills up or a
// new one starts. The upload is a copy on the launch's stream, so it lands after the
// launches before it on that stream have read the old table, and the host waits for nothing
// (only a table that must grow waits for its stream first). Launches on other streams have
// tables of their own. Every table covers every cell of the grid once, so the lengths decide
// only the order: host lengths that disagree with the GPU's cost speed, never a wrong number.
class OrderTables {
   public:
    // The table for this launch, or nullptr: the plan is not longest-first, or the caller
    // gave no host lengths (then the grid's own order).
    const int2* table_for(const pa::PagedDecodeArgs& a, const SplitPlan& p, int partitions, cudaStream_t stream) {
        if (!p.longest_first || a.context_lens_host == nullptr) return nullptr;
        return tables_.with(stream, [&](Table& t) { return table_in(t, a, p, partitions, stream); });
    }

   private:
    static_assert(sizeof(Cell) == sizeof(int2) && alignof(Cell) == alignof(int), "a Cell is the kernels' int2");
    struct Table {  // the lengths and plan of the stream's last launch, and the order uploaded
        std::vector<int> lens;
        int partition_size = -1, splits = -1, partitions = -1;
        std::vector<Cell> order;
        pa::DeviceBuffer<Cell> device;
    };

    static const int2* table_in(Table& t, const pa::PagedDecodeArgs& a, const SplitPlan& p, int partitions,
                                cudaStream_t stream) {
        const bool same = t.partition_size == p.partition_size && t.splits == p.splits && t.partitions == partitions &&
                          std::equal(t.lens.begin(), t.lens.end(), a.context_lens_host, a.context_lens_host + a.B);
        if (!same) {
            t.lens.assign(a.context_lens_host, a.context_lens_host + a.B);
            t.partition_size = p.partition_size;
            t.splits = p.splits;
            t.partitions = partitions;
            std::vector<Cell> order = longest_first_order(p, t.lens, partitions);
            const auto same_cell = [](const Cell& x, const Cell& y) { return x.seq == y.seq && x.part == y.part; };
            if (!std::equal(order.begin(), order.end(), t.order.begin(), t.order.end(), same_cell)) {
                if (t.device.size() < order.size()) {
                    CUDA_CHECK(cudaStreamSynchronize(stream));  // a launch in flight may still read the old table
                    t.device.allocate(order.size());
                }
                // from pageable memory: the call returns once the bytes are staged, so `order` may go
                CUDA_CHECK(cudaMemcpyAsync(t.device.get(), order.data(), order.size() * sizeof(Cell),
                                           cudaMemcpyHostToDevice, stream));
                t.order = std::move(order);
            }
        }
        return reinterpret_cast<const int2*>(t.device.get());
    }

    pa::PerStream<Table> tables_;
};

OrderTables g_orders;

// The GPU and the build for the plans that need sm_90 code, for why_not and the launchers: the
// plan's kernel must run its sm_90 code here (unit copies: cp.async.bulk; step 8: clusters).
std::string units_sm90_why_not(const void* kernel, const pa::DeviceInfo& info) {
    return pa::sm90_code_why_not(kernel, info, "unit copies use cp.async.bulk", "split_k_<P> runs here");
}
std::string cluster_sm90_why_not(const void* kernel, const pa::DeviceInfo& info) {
    return pa::sm90_code_why_not(kernel, info, "the cluster merge needs thread-block clusters", "step 7 runs here");
}

// The unit copies' page-size refusal: pages of at least one unit.
std::string units_page_why_not(int D, int block_size) {
    if (D != 256 && block_size < 16)
        return pa::strf("unit copies need pages of at least one 16-token unit at D %d; these have %d tokens", D, block_size);
    return "";
}

// The unit copies' refusals, for the launcher: the GPU and the build, then the page size.
std::string units_why_not(const void* kernel, int D, int block_size, const pa::DeviceInfo& info) {
    const std::string why = units_sm90_why_not(kernel, info);
    return why.empty() ? units_page_why_not(D, block_size) : why;
}

// A step's plan (tgs > 0) as far as the plan alone decides: "" or why the steps cannot run it.
std::string step_plan_why_not(const SplitPlan& p) {
    if (p.tgs != kStepTgs) return pa::strf("the thread-group steps are built for TGS %d, not %d", kStepTgs, p.tgs);
    if (p.splits > 0 || p.head_rows || p.units || p.longest_first)
        return "the thread-group steps take fixed partitions only (no even splits, head rows, unit copies or longest-first "
               "order)";
    return "";
}

std::string step_why_not(const SplitPlan& p, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const std::string why = step_plan_why_not(p);
    if (!why.empty()) return why;
    return p.fused ? step2::why_not(s, p.partition_size, info) : step1::why_not(s, p.partition_size, info);
}

template <bool FUSED>
void launch_partition_kernel(const pa::PagedDecodeArgs& a, const SplitPlan& p, const SplitScratch& s, unsigned* counters,
                             cudaStream_t stream) {
    const Launch l = plan_launch(p, a.B, a.H, a.Hkv, s.max_partitions);
    const int partition_size = p.splits > 0 ? 0 : p.partition_size;
    const int2* cell_order = g_orders.table_for(a, p, s.max_partitions, stream);
    const bool built = with_plan_kernel<FUSED>(p, a.dtype, a.D, l, [&](auto kernel, int smem, auto step) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        if (p.units) {  // a unit kernel where it cannot run would trap: say why instead
            const std::string why =
                units_why_not(reinterpret_cast<const void*>(kernel), a.D, a.block_size, pa::current_device_info());
            if (!why.empty()) throw pa::CudaError("lesson03: " + plan_name(p) + ": " + why);
        }
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        if constexpr (decltype(step)::value == 8) {  // launch_cluster's (launch never sends a cluster plan here)
            throw pa::CudaError("lesson03: " + plan_name(p) + " merges in a cluster: no scratch to write");
        } else if constexpr (decltype(step)::value == 3) {  // fixed partitions in the grid's order only
            kernel<<<l.grid, kMmaThreads, smem, stream>>>(
                static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
                a.max_blocks_per_seq, a.scale, partition_size, s, counters);
        } else {
            kernel<<<l.grid, kMmaThreads, smem, stream>>>(
                static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
                a.max_blocks_per_seq, a.scale, partition_size, p.splits, s, counters, cell_order);
        }
        CUDA_CHECK_LAUNCH();
    });
    if (!built)
        throw pa::CudaError(pa::strf("lesson03: no %s kernel built for %s D %d with %d heads per CTA",
                                     p.head_rows ? "head-row" : "partition", pa::dtype_name(a.dtype), a.D, l.heads));
}

// Step 8: grid (Hkv, B, P) in clusters of (1, 1, P); the kernel writes the output itself.
void launch_cluster(const pa::PagedDecodeArgs& a, const SplitPlan& p, cudaStream_t stream) {
    const int parts = grid_partitions(p, a.max_ctx);
    if (parts > kClusterMostParts)
        throw pa::CudaError(pa::strf("lesson03: %s: %d partitions, more than the %d a cluster merges", plan_name(p).c_str(),
                                     parts, kClusterMostParts));
    const Launch l = plan_launch(p, a.B, a.H, a.Hkv, parts);
    const int partition_size = p.splits > 0 ? 0 : p.partition_size;
    const bool built = with_cluster_kernel(a.dtype, a.D, l.heads, p.units, parts, [&](auto kernel, int smem, auto) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        const std::string why = cluster_sm90_why_not(reinterpret_cast<const void*>(kernel), pa::current_device_info());
        if (!why.empty()) throw pa::CudaError("lesson03: " + plan_name(p) + ": " + why);
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        const pa::ClusterLaunch cl(l.grid, dim3(kMmaThreads), smem, stream, dim3(1, 1, parts));  // a cluster: the partitions
        CUDA_CHECK(cudaLaunchKernelEx(&cl.cfg, kernel, static_cast<T*>(a.out), static_cast<const T*>(a.q),
                                      static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache), a.block_table,
                                      a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size, a.max_blocks_per_seq, a.scale,
                                      partition_size, p.splits));
    });
    if (!built)
        throw pa::CudaError(pa::strf("lesson03: no cluster-merge kernel built for %s D %d with %d head rows",
                                     pa::dtype_name(a.dtype), a.D, l.heads));
}

}  // namespace

void launch_partitions(const pa::PagedDecodeArgs& a, const SplitPlan& p, const SplitScratch& s, cudaStream_t stream) {
    if (p.fused || p.cluster)
        throw pa::CudaError("lesson03: launch_partitions writes the scratch only; a fused or cluster plan merges in its own launch");
    if (p.tgs > 0) {  // step 1: one CTA per (query head, sequence, partition) of s
        const std::string why = step_plan_why_not(p);
        if (!why.empty()) throw pa::CudaError("lesson03: " + plan_name(p) + ": " + why);
        step1::launch(a, p.partition_size, s, stream);
        return;
    }
    if (p.splits == 0 && (p.partition_size < 32 || p.partition_size % 32 != 0))
        throw pa::CudaError(pa::strf("lesson03: partition size %d is not a positive multiple of 32", p.partition_size));
    if (s.max_partitions < grid_partitions(p, a.max_ctx))
        throw pa::CudaError(pa::strf("lesson03: scratch holds %d partitions, ctx %d under plan %s needs %d", s.max_partitions,
                                     a.max_ctx, plan_name(p).c_str(), grid_partitions(p, a.max_ctx)));
    launch_partition_kernel<false>(a, p, s, nullptr, stream);
}

void launch_partitions(const pa::PagedDecodeArgs& a, int partition_size, const SplitScratch& s, cudaStream_t stream) {
    SplitPlan p;
    p.partition_size = partition_size;
    launch_partitions(a, p, s, stream);
}

// On sm_90 the reduce goes out as a programmatic dependent launch: the GPU may start it
// before the partition kernel has finished (the head-row kernel's CTAs allow it after their
// main loop, the partition kernel's as they exit), and its CTAs wait at griddepcontrol.wait
// until the partitions are complete and their scratch is visible. That hides part of the
// second launch's gap (NOTES.md, "The fused merge"). Code built for older GPUs is launched plainly.
void launch_reduce(const pa::PagedDecodeArgs& a, const SplitScratch& s, cudaStream_t stream) {
    const bool built = with_reduce_kernel(a.dtype, a.D, [&](auto kernel) {
        using T = typename pa::KernelScalar<decltype(kernel)>::type;
        pa::launch_maybe_dependent(kernel, dim3(a.H, a.B), dim3(kReduceThreads), stream, true, static_cast<T*>(a.out), s,
                                   a.H);
    });
    if (!built) throw pa::CudaError(pa::strf("lesson03: no reduce kernel built for D %d", a.D));
}

std::string why_not(const SplitPlan& p, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    if (p.tgs > 0) return step_why_not(p, s, info);
    if (p.splits == 0 && (p.partition_size < 32 || p.partition_size % 32 != 0))
        return pa::strf("partition size %d is not a positive multiple of 32", p.partition_size);
    if (p.units || p.cluster) {  // the build and the GPU first: without sm_90 code no shape runs these plans
        std::string why;
        // A group of 16 and 2 partitions: built for every dtype and D the plan has any kernel for, and
        // every kernel of a build has the same code; with none for this D, refused below as not built.
        const Launch any = plan_launch(p, 1, 16, 1, 2);
        with_plan_kernel<false>(p, s.dtype, s.D, any, [&](auto kernel, int, auto) {
            const void* k = reinterpret_cast<const void*>(kernel);
            why = p.cluster ? cluster_sm90_why_not(k, info) : units_sm90_why_not(k, info);
        });
        if (!why.empty()) return why;
    }
    const int heads = heads_per_cta(s.group());
    if (heads == 0)
        return pa::strf("the grouped CTA serves at most 32 query heads; group %d needs a per-head kernel (lesson 02)",
                        s.group());
    if (p.head_rows && head_rows_of(s.group()) == 0)
        return pa::strf("head rows are for groups of 9 to 32 query heads (a 16-row mma block); group %d runs split_k_<P>",
                        s.group());
    if (p.flat_merge && !p.head_rows) return "the flat merge is the head-row kernel's (split_k_rows_..._flat_<P>)";
    if (p.cluster && !p.flat_merge)
        return "the cluster merge is the flat head-row kernel's (split_k_rows_..._flat_cluster_<P>)";
    if (p.cluster && (p.fused || p.longest_first))
        return "the cluster merge merges in its own launch and starts the partitions in the grid's order (no fused, no lpt)";
    if (p.cluster && grid_partitions(p, s.max_ctx()) > kClusterMostParts)
        return pa::strf("%d partitions; the cluster merge takes at most %d (step 7 runs more)",
                        grid_partitions(p, s.max_ctx()), kClusterMostParts);
    const Launch l = plan_launch(p, s.B, s.H, s.Hkv, grid_partitions(p, s.max_ctx()));
    const size_t need = plan_smem(p, s.dtype, s.D, l);
    if (need == 0) return pa::strf("no %s kernel built for D %d", p.head_rows ? "head-row" : "partition", s.D);
    if (p.units) {  // the GPU and the build were asked above
        const std::string why = units_page_why_not(s.D, s.block_size);
        if (!why.empty()) return why;
    }
    const bool smem_known = info.smem_per_block_optin > 0;  // a real GPU's (not a probe's)
    const bool smem_fits = !smem_known || need + 1024 <= static_cast<size_t>(info.smem_per_block_optin);
    if (p.cluster && smem_known && smem_fits) {  // whether the grid's clusters all fit the GPU at once
        std::string why;
        with_plan_kernel<false>(p, s.dtype, s.D, l, [&](auto kernel, int smem, auto) {
            const void* k = reinterpret_cast<const void*>(kernel);
            const long long clusters = static_cast<long long>(l.grid.x) * l.grid.y;
            const int most = pa::max_active_clusters(k, kMmaThreads, smem, static_cast<int>(l.grid.z));
            if (clusters > most)
                why = pa::strf("%lld clusters of %u CTAs, and this GPU runs %d at once (step 7 runs the grid in one wave)",
                               clusters, l.grid.z, most);
        });
        if (!why.empty()) return why;
    }
    if (!smem_fits)
        return pa::strf("stages K/V through %zu KiB of shared memory per CTA; this GPU (%s) gives %d KiB", need / 1024,
                        info.name.c_str(), info.smem_per_block_optin / 1024);
    if (l.grid.z > 65535) return pa::strf("%u partitions exceed the grid's z limit", l.grid.z);
    return "";
}

void launch(const pa::PagedDecodeArgs& a, const SplitPlan& p, cudaStream_t stream) {
    if (p.cluster) {  // step 8: no scratch, no reduce
        launch_cluster(a, p, stream);
        return;
    }
    const int partitions = grid_partitions(p, a.max_ctx);
    // merge counters: one per (sequence, KV head) for the mma kernels, per (sequence, head) for the steps
    const size_t counters = static_cast<size_t>(a.B) * (p.tgs > 0 ? a.H : a.Hkv);
    pa::SplitBuffers& w = g_workspace.at_least(static_cast<size_t>(a.B) * a.H * partitions * (a.D + 2), counters, stream);
    const SplitScratch s = scratch_in(w, a.B, a.H, partitions);
    if (p.tgs > 0) {
        const std::string why = step_plan_why_not(p);
        if (!why.empty()) throw pa::CudaError("lesson03: " + plan_name(p) + ": " + why);
        if (p.fused) {
            step2::launch(a, p.partition_size, s, w.counters.get(), stream);
        } else {
            step1::launch(a, p.partition_size, s, stream);
            launch_reduce(a, s, stream);
        }
        return;
    }
    if (p.fused) {
        launch_partition_kernel<true>(a, p, s, w.counters.get(), stream);
    } else {
        launch_partition_kernel<false>(a, p, s, nullptr, stream);
        launch_reduce(a, s, stream);
    }
}

pa::LaunchGeometry geometry(const SplitPlan& p, const pa::DecodeShape& s, const pa::DeviceInfo&) {
    if (p.tgs > 0) return p.fused ? step2::geometry(s, p.partition_size) : step1::geometry(s, p.partition_size);
    const Launch l = plan_launch(p, s.B, s.H, s.Hkv, grid_partitions(p, s.max_ctx()));
    pa::LaunchGeometry g;
    with_plan_kernel<false>(p, s.dtype, s.D, l, [&](auto kernel, int smem, auto) {
        const void* k = reinterpret_cast<const void*>(kernel);
        pa::opt_in_max_dynamic_smem(k);
        g.ctas = static_cast<long long>(l.grid.x) * l.grid.y * l.grid.z;
        g.threads = kMmaThreads;
        g.smem_bytes = smem;
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(k), g.threads, g.smem_bytes);
    });
    g.partitions = grid_partitions(p, s.max_ctx());
    return g;
}

pa::DecodeVariant variant(const SplitPlan& p) {
    pa::DecodeVariant v;
    v.name = plan_name(p);
    v.why_not = [p](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return why_not(p, s, info); };
    v.launch = [p](const pa::PagedDecodeArgs& a, cudaStream_t st) { launch(a, p, st); };
    v.geometry = [p](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return geometry(p, s, info); };
    return v;
}

pa::DecodeVariant single_pass_variant() {
    pa::DecodeVariant v = lesson02::auto_variant();
    v.name = "single_pass";
    return v;
}

static_assert(kTinyGroupedGrid == lesson02::kMinGroupedCtas, "our_rule's per-head threshold is lesson 02's");

ShapeFacts facts_of(const pa::DecodeShape& s, int sms) {
    ShapeFacts f;
    f.B = s.B;
    f.H = s.H;
    f.Hkv = s.Hkv;
    f.max_ctx = s.max_ctx();
    f.total_ctx = s.total_tokens();
    f.sms = sms;
    return f;
}

namespace {

// The partition size of the thread-group steps where auto runs them: the largest power of
// two from 64 to 4096 tokens whose grid (B * H * partitions CTAs of 128 threads and a few
// KiB) still gives every SM four CTAs; 64 where none does.
int step_partition_size(const pa::DecodeShape& s, int sms) {
    int size = 64;
    for (int p = 128; p <= 4096; p *= 2)
        if (static_cast<long long>(s.B) * s.H * num_partitions(s.max_ctx(), p) >= 4LL * sms) size = p;
    return size;
}

}  // namespace

namespace {

// auto's choice, resolved once per (GPU, shape's facts, reduce) and kept: a launch pays a lookup,
// not the rule and its refusals again.
struct ChoiceKey {
    std::string gpu;
    int sms, smem_optin, B, H, Hkv, D, block_size, max_ctx, dtype;
    long long total_ctx;
    bool parallel_reduce;
    bool operator<(const ChoiceKey& o) const {
        return std::tie(gpu, sms, smem_optin, B, H, Hkv, D, block_size, max_ctx, dtype, total_ctx, parallel_reduce) <
               std::tie(o.gpu, o.sms, o.smem_optin, o.B, o.H, o.Hkv, o.D, o.block_size, o.max_ctx, o.dtype, o.total_ctx,
                        o.parallel_reduce);
    }
};

Choice resolve_auto(const pa::DecodeShape& s, const pa::DeviceInfo& info, bool parallel_reduce);

}  // namespace

Choice auto_choice(const pa::DecodeShape& s, const pa::DeviceInfo& info, bool parallel_reduce) {
    static std::mutex mutex;
    static std::map<ChoiceKey, Choice> cache;
    const ChoiceKey key{info.name, info.sms, info.smem_per_block_optin, s.B, s.H, s.Hkv, s.D, s.block_size, s.max_ctx(),
                        static_cast<int>(s.dtype), s.total_tokens(), parallel_reduce};
    {
        std::lock_guard<std::mutex> lock(mutex);
        const auto it = cache.find(key);
        if (it != cache.end()) return it->second;
    }
    const Choice c = resolve_auto(s, info, parallel_reduce);
    std::lock_guard<std::mutex> lock(mutex);
    cache.emplace(key, c);
    return c;
}

namespace {

Choice resolve_auto(const pa::DecodeShape& s, const pa::DeviceInfo& info, bool parallel_reduce) {
    ShapeFacts f = facts_of(s, info.sms);
    f.parallel_reduce = parallel_reduce;
    Choice c = our_rule(f);
    if (c.split && c.plan.cluster && !why_not(c.plan, s, info).empty()) c.plan.cluster = false;  // step 7 then
    if (c.split && c.plan.head_rows && !why_not(c.plan, s, info).empty())
        c.plan.head_rows = c.plan.flat_merge = c.plan.cluster = false;
    if (c.split && c.plan.units && !why_not(c.plan, s, info).empty()) c.plan.units = false;
    // one partition was worth it only with unit copies (our_rule): without them, the single pass
    if (c.split && !c.plan.units && grid_partitions(c.plan, s.max_ctx()) < 2) c = Choice{};
    if (c.split && why_not(c.plan, s, info).empty()) return c;
    // The mma kernels cannot run here (a GPU with less shared memory, a group above 32): the
    // thread-group steps, where split-k was wanted or the single pass cannot run the shape
    // (fused, unless the caller's reduce follows the partitions).
    const bool single_pass_runs = lesson02::why_not(lesson02::auto_config(s, info), s, info).empty();
    if (!c.split && single_pass_runs) return c;
    Choice step;
    step.split = true;
    step.plan.tgs = kStepTgs;
    step.plan.partition_size = step_partition_size(s, info.sms);
    step.plan.fused = !parallel_reduce;
    if (single_pass_runs && grid_partitions(step.plan, s.max_ctx()) < 2) return Choice{};
    return why_not(step.plan, s, info).empty() ? step : Choice{};
}

}  // namespace

pa::DecodeVariant auto_variant() {
    const pa::DecodeVariant sp = single_pass_variant();
    pa::DecodeVariant v;
    v.name = "auto";
    v.why_not = [sp](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const Choice c = auto_choice(s, info);
        return c.split ? why_not(c.plan, s, info) : sp.why_not(s, info);
    };
    v.launch = [sp](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        const Choice c = auto_choice(pa::launch_shape(a), pa::current_device_info());
        if (c.split) launch(a, c.plan, st);
        else sp.launch(a, st);
    };
    v.geometry = [sp](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        const Choice c = auto_choice(s, info);
        return c.split ? geometry(c.plan, s, info) : sp.geometry(s, info);
    };
    return v;
}

namespace {

// Step 1 (fused: step 2) at partitions of `size` tokens.
SplitPlan step_plan(int size, bool fused) {
    SplitPlan p;
    p.tgs = kStepTgs;
    p.partition_size = size;
    p.fused = fused;
    return p;
}

SplitPlan fixed(int size, bool fused = false, bool head_rows = false) {
    SplitPlan p;
    p.partition_size = size;
    p.fused = fused;
    p.head_rows = head_rows;
    return p;
}

// split_k_even: one split count for the whole batch, the split-count rule's (at least 2).
SplitPlan even_plan(const pa::DecodeShape& s, int sms) {
    SplitPlan p;
    p.partition_size = 0;
    p.splits = std::max(2, split_count_rule(facts_of(s, sms)).plan.splits);
    return p;
}

pa::DecodeVariant even_variant() {
    pa::DecodeVariant v;
    v.name = "split_k_even";
    v.why_not = [](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return why_not(even_plan(s, info.sms), s, info); };
    v.launch = [](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        launch(a, even_plan(pa::launch_shape(a), pa::current_sm_count()), st);
    };
    v.geometry = [](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return geometry(even_plan(s, info.sms), s, info); };
    return v;
}

const char* const kStepNames[kLadderSteps + 1] = {"",           "partitions", "fused_merge", "tensor_cores",
                                                   "longest_first", "unit_copies", "head_rows",  "flat_merge",
                                                   "cluster_merge"};

}  // namespace

const char* step_name(int step) { return step >= 1 && step <= kLadderSteps ? kStepNames[step] : ""; }

SplitPlan ladder_plan(int step, const pa::DecodeShape& s, const pa::DeviceInfo& info, int partition_size) {
    if (step < 1 || step > kLadderSteps) throw pa::CudaError(pa::strf("lesson03: there is no step %d", step));
    SplitPlan p;
    if (step <= 2) {
        p = step_plan(step_partition_size(s, info.sms), step == 2);
    } else {
        const SplitPlan rule = our_plan(facts_of(s, info.sms));
        p.partition_size = rule.partition_size;
        p.fused = rule.fused;
        p.longest_first = step >= 4;
        p.units = step >= 5;
        p.head_rows = step >= 6;
        p.flat_merge = step >= 7;
        p.cluster = step >= 8;  // its own launch, in the grid's order
        if (p.cluster) p.fused = p.longest_first = false;
    }
    if (partition_size > 0) p.partition_size = partition_size;
    return p;
}

pa::DecodeVariant ladder_variant(int step, int partition_size) {
    ladder_plan(step, pa::make_shape("probe", 8, 1, {1}), pa::DeviceInfo{}, 0);  // refuses a step that does not exist
    pa::DecodeVariant v;
    v.name = step_name(step);
    v.why_not = [=](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        return why_not(ladder_plan(step, s, info, partition_size), s, info);
    };
    v.launch = [=](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        launch(a, ladder_plan(step, pa::launch_shape(a), pa::current_device_info(), partition_size), st);
    };
    v.geometry = [=](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        return geometry(ladder_plan(step, s, info, partition_size), s, info);
    };
    return v;
}

std::vector<pa::DecodeVariant> bench_variants(int partition_size) {
    std::vector<pa::DecodeVariant> out = {single_pass_variant()};
    for (int step = 1; step <= kLadderSteps; ++step) out.push_back(ladder_variant(step, partition_size));
    out.push_back(auto_variant());
    return out;
}

std::vector<pa::DecodeVariant> sweep_variants() {
    std::vector<pa::DecodeVariant> out = {single_pass_variant(), variant(step_plan(256, false)), variant(step_plan(256, true))};
    for (int size : {64, 128, 256, 512, 1024, 4096}) out.push_back(variant(fixed(size)));
    for (int size : {128, 512}) out.push_back(variant(fixed(size, true)));
    for (int size : {64, 128, 256, 512, 1024}) out.push_back(variant(fixed(size, false, true)));  // groups of 9..32 only
    for (int size : {128, 256, 512, 1024}) {  // head rows with unit copies (sm_90)
        SplitPlan u = fixed(size, false, true);
        u.units = true;
        out.push_back(variant(u));
    }
    for (int size : {64, 128, 256, 512, 1024, 2048, 4096, 8192}) {
        SplitPlan u = fixed(size);
        u.units = true;
        out.push_back(variant(u));
        u.fused = true;
        if (size == 128 || size == 512) out.push_back(variant(u));
    }
    for (int size : {1024, 2048, 4096, 8192}) {  // longest first (a batch of mixed lengths)
        SplitPlan u = fixed(size);
        u.units = u.longest_first = true;
        out.push_back(variant(u));
    }
    out.push_back(even_variant());
    out.push_back(auto_variant());
    return out;
}

std::vector<pa::DecodeVariant> check_only_variants() {
    SplitPlan even8;
    even8.partition_size = 0;
    even8.splits = 8;
    SplitPlan rows_even8 = even8;
    rows_even8.head_rows = true;
    SplitPlan units32 = fixed(32), units_fused32 = fixed(32, true), units_even8 = even8;
    SplitPlan rows_units32 = fixed(32, false, true), rows_units_fused32 = fixed(32, true, true), rows_units_even8 = rows_even8;
    units32.units = units_fused32.units = units_even8.units = true;
    rows_units32.units = rows_units_fused32.units = rows_units_even8.units = true;
    SplitPlan cluster_even3 = rows_even8, cluster_units_even4 = rows_units_even8;  // step 8, sentinel partitions included
    cluster_even3.splits = 3;
    cluster_units_even4.splits = 4;
    cluster_even3.flat_merge = cluster_even3.cluster = cluster_units_even4.flat_merge = cluster_units_even4.cluster = true;
    return {variant(step_plan(32, false)), variant(step_plan(32, true)),
            variant(fixed(32)), variant(fixed(32, true)), variant(even8),
            variant(fixed(32, false, true)), variant(fixed(32, true, true)), variant(rows_even8),
            variant(units32), variant(units_fused32), variant(units_even8),
            variant(rows_units32), variant(rows_units_fused32), variant(rows_units_even8),
            variant(cluster_even3), variant(cluster_units_even4)};
}

std::vector<pa::DecodeShape> bench_shapes() {
    std::vector<pa::DecodeShape> out = pa::table_a();
    for (const auto& s : pa::table_b()) out.push_back(s);
    for (const auto& s : pa::long_context_shapes()) out.push_back(s);
    return out;
}

std::vector<pa::DecodeShape> split_check_shapes() {
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    std::vector<int> mixed;  // 16 sequences of 1 .. 3000 tokens: short ones leave sentinel partitions
    for (int i = 0; i < 16; ++i) mixed.push_back(1 + (i * 977) % 3000);
    return {
        pa::make_shape("ctx513-g8", 8, 1, {513}, 128, 16, b),           // 17 partitions of 32
        pa::make_shape("mixed-sentinels-g4", 16, 4, mixed, 128, 16, f),  // many empty partitions
        pa::make_shape("mixed-g32-D64", 32, 1, {5, 700, 2049}, 64, 8, b),
        pa::make_shape("mixed-g12", 24, 2, {1, 129, 1000, 4097}, 128, 16, f),  // head rows: 16 rows, 4 idle
        pa::make_shape("mixed-g20-D64", 40, 2, {33, 2500}, 64, 32, b),         // head rows: 32 rows, 12 idle
        pa::make_shape("long-g8-D256", 8, 1, {9000, 17}, 256, 32, f),
    };
}

}  // namespace lesson03
