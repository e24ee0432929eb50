// Every instantiation of lesson 02's kernel, compiled once, and the launcher.
#include "thread_group_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.cuh"
#include "launch_utils.cuh"
#include "table.h"
#include "thread_group_decode.cuh"

namespace lesson02 {

int grouped_mma_ctas_per_sm(int group_n, long long ctas, int sms) { return group_n == 8 && ctas > sms ? 2 : 1; }

Config grouped_mma_config() {
    Config c;
    c.mapping = Mapping::grouped;
    c.tensor_cores = true;
    return c;
}

std::string config_name(const Config& c) {
    if (c.tensor_cores) return "grouped_mma";
    std::string n = std::string(c.mapping == Mapping::per_head ? "per_head" : "grouped") + "_tgs" + std::to_string(c.tgs);
    if (!c.wide_k) return n + "_scalar_k";
    if (!c.q_regs) return n + "_q_smem";
    return n;
}

int heads_per_cta(const Config& c, int group) {
    if (c.tensor_cores) {
        for (int g : {8, 16, 32})
            if (group <= g) return g;
        return 0;
    }
    if (c.mapping == Mapping::per_head || group == 1) return 1;
    for (int g : {2, 4, 8, 32})
        if (group <= g) return g;
    return 0;  // not supported
}

std::string why_not(const Config& c, const pa::DecodeShape& s) {
    if (c.tensor_cores) {
        if (c.mapping != Mapping::grouped) return "the tensor-core kernel is a grouped CTA";
        if (heads_per_cta(c, s.group()) == 0)
            return pa::strf("the grouped CTA serves at most 32 query heads; group %d needs the per_head mapping", s.group());
        return "";
    }
    if (c.tgs != 4 && c.tgs != 8 && c.tgs != 16) return "THREAD_GROUP_SIZE must be 4, 8 or 16";
    if (heads_per_cta(c, s.group()) == 0)
        return pa::strf("the grouped CTA serves at most 32 query heads; group %d needs the per_head mapping", s.group());
    if ((!c.wide_k || !c.q_regs) && (c.mapping != Mapping::grouped || c.tgs != 8 || s.D != 128))
        return "the ablation steps are built for grouped TGS 8, D 128 only";
    return "";
}

namespace {

// Logits of one chunk get at most this much shared memory; a longer context is walked in chunks.
constexpr int kLogitBudgetBytes = 32 * 1024;

int chunk_tokens(int group_max, int max_ctx) {
    const int budget = kLogitBudgetBytes / (4 * group_max) / kChunkAlign * kChunkAlign;
    const int whole = (max_ctx + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    return std::max(kChunkAlign, std::min(budget, whole));
}

struct Resolved {
    const void* kernel = nullptr;
    int token_lanes = 0;
};

template <class T, int D, int TGS, int G, bool W, bool R>
Resolved resolve_one() {
    return {reinterpret_cast<const void*>(thread_group_decode_kernel<T, D, TGS, G, W, R>), PvLayout<D, G>::kTokenLanes};
}

template <class T, int D, int TGS, bool W, bool R>
Resolved resolve_group(int g) {
    switch (g) {
        case 1: return resolve_one<T, D, TGS, 1, W, R>();
        case 2: return resolve_one<T, D, TGS, 2, W, R>();
        case 4: return resolve_one<T, D, TGS, 4, W, R>();
        case 8: return resolve_one<T, D, TGS, 8, W, R>();
        case 32: return resolve_one<T, D, TGS, 32, W, R>();
        default: return {};
    }
}

template <class T, int D, bool W, bool R>
Resolved resolve_tgs(int tgs, int g) {
    if constexpr (W && R) {
        if (tgs == 4) return resolve_group<T, D, 4, W, R>(g);
        if (tgs == 16) return resolve_group<T, D, 16, W, R>(g);
    }
    if (tgs == 8) return resolve_group<T, D, 8, W, R>(g);
    return {};
}

template <class T>
Resolved resolve_dtype(const Config& c, int D, int g) {
    if (!c.wide_k) return D == 128 ? resolve_tgs<T, 128, false, false>(c.tgs, g) : Resolved{};  // baseline: q in smem too
    if (!c.q_regs) return D == 128 ? resolve_tgs<T, 128, true, false>(c.tgs, g) : Resolved{};
    switch (D) {
        case 64: return resolve_tgs<T, 64, true, true>(c.tgs, g);
        case 128: return resolve_tgs<T, 128, true, true>(c.tgs, g);
        case 256: return resolve_tgs<T, 256, true, true>(c.tgs, g);
        default: return {};
    }
}

Resolved resolve(const Config& c, pa::DType t, int D, int group_max) {
    return t == pa::DType::fp16 ? resolve_dtype<__half>(c, D, group_max) : resolve_dtype<__nv_bfloat16>(c, D, group_max);
}

struct Plan {
    Resolved r;
    int ctas_per_sm = 1;  // grouped_mma's layout
    int threads = kThreads;
    int chunk = 0;
    size_t smem = 0;
    dim3 grid;
};

Plan plan(const Config& c, pa::DType t, int B, int H, int Hkv, int D, int max_ctx) {
    const int g = heads_per_cta(c, H / Hkv);
    Plan p;
    if (c.tensor_cores) {  // no chunks: the softmax step runs once per tile
        p.ctas_per_sm = grouped_mma_ctas_per_sm(g, static_cast<long long>(B) * Hkv, pa::current_sm_count());
        p.r.kernel = grouped_mma_kernel(t, D, g, p.ctas_per_sm);
        if (!p.r.kernel) throw pa::CudaError("lesson02: no kernel built for grouped_mma with D " + std::to_string(D));
        p.smem = grouped_mma_smem_bytes(D, g, p.ctas_per_sm);
        p.threads = grouped_mma_threads();
        p.grid = dim3(Hkv, B);
        return p;
    }
    p.r = resolve(c, t, D, g);
    if (!p.r.kernel) throw pa::CudaError("lesson02: no kernel built for " + config_name(c) + " with D " + std::to_string(D));
    p.chunk = chunk_tokens(g, max_ctx);
    p.smem = sizeof(float) * smem_words(D, g, p.chunk, p.r.token_lanes);
    p.grid = dim3(c.mapping == Mapping::per_head ? H : Hkv, B);
    return p;
}

// Both kernels take (out, q, k, v, block_table, context_lens, H, Hkv, group, block_size,
// max_blocks_per_seq, scale), then the CUDA-core kernel its chunk and grouped_mma its
// timeline record (null, unless it is the timeline build).
void launch_plan(const Plan& p, bool tensor_cores, const pa::PagedDecodeArgs& a, uint64_t* timeline, int timeline_stride,
                 cudaStream_t stream) {
    pa::opt_in_max_dynamic_smem(p.r.kernel);
    void* out = a.out;
    const void *q = a.q, *k = a.k_cache, *v = a.v_cache;
    const int* bt = a.block_table;
    const int* cl = a.context_lens;
    int H = a.H, Hkv = a.Hkv, group = a.H / a.Hkv, bs = a.block_size, mbps = a.max_blocks_per_seq, chunk = p.chunk;
    float scale = a.scale;
    void* cuda_core_args[] = {&out, &q, &k, &v, &bt, &cl, &H, &Hkv, &group, &bs, &mbps, &scale, &chunk};
    void* mma_args[] = {&out, &q, &k, &v, &bt, &cl, &H, &Hkv, &group, &bs, &mbps, &scale, &timeline, &timeline_stride};
    CUDA_CHECK(cudaLaunchKernel(p.r.kernel, p.grid, dim3(p.threads), tensor_cores ? mma_args : cuda_core_args, p.smem, stream));
}

}  // namespace

void launch(const pa::PagedDecodeArgs& a, const Config& c, cudaStream_t stream) {
    launch_plan(plan(c, a.dtype, a.B, a.H, a.Hkv, a.D, a.max_ctx), c.tensor_cores, a, nullptr, 0, stream);
}

int grouped_mma_tile_tokens(int head_size) { return tile_tokens(head_size); }

std::string grouped_mma_timeline_why_not(const pa::DecodeShape& s) {
    const Config c = grouped_mma_config();
    std::string why = why_not(c, s);
    if (why.empty() && s.D != 128) why = "the timeline build of grouped_mma is for D 128 only";
    return why;
}

void launch_grouped_mma_timeline(const pa::PagedDecodeArgs& a, uint64_t* timeline, int timeline_stride, cudaStream_t stream) {
    const Config c = grouped_mma_config();
    Plan p = plan(c, a.dtype, a.B, a.H, a.Hkv, a.D, a.max_ctx);
    p.r.kernel = grouped_mma_timeline_kernel(a.dtype, a.D, heads_per_cta(c, a.H / a.Hkv), p.ctas_per_sm);
    if (!p.r.kernel) throw pa::CudaError("lesson02: no timeline build of grouped_mma for D " + std::to_string(a.D));
    launch_plan(p, true, a, timeline, timeline_stride, stream);
}

pa::LaunchGeometry geometry(const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo&) {
    const Plan p = plan(c, s.dtype, s.B, s.H, s.Hkv, s.D, s.max_ctx());
    pa::opt_in_max_dynamic_smem(p.r.kernel);
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(p.grid.x) * p.grid.y;
    g.threads = p.threads;
    g.smem_bytes = static_cast<int>(p.smem);
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g.ctas_per_sm, p.r.kernel, g.threads, p.smem));
    return g;
}

// The rule (see README), read off the measured sweep on an H200 (plots/data/h200/lesson02.csv):
//  * grouped_mma, the grouped CTA with tensor cores, by default: it reads K/V once for the
//    whole group, its dot products cost next to nothing, its copy warps keep the ring full,
//    and on grids larger than the GPU two CTAs share an SM. It was the fastest or within
//    noise of it on every measured shape with at least 4 grouped CTAs, MHA included (where
//    the CUDA-core kernel at TGS 4 also spills registers at D 256).
//  * per_head_tgs4 for a grouped grid of fewer than 4 CTAs (MQA with one to three
//    sequences): the per-head grid's parallelism is worth more than the re-reads, which
//    the other heads' CTAs find in L2; and for a group above 32, which has no grouped
//    kernel. TGS 4 because K comes from shared memory, so a smaller group only means more
//    tokens per step and a shorter shuffle tree.
Config auto_config(int B, int H, int Hkv) {
    const Config mma = grouped_mma_config();
    const bool tiny_grouped_grid = static_cast<long long>(B) * Hkv < kMinGroupedCtas;
    if (heads_per_cta(mma, H / Hkv) > 0 && !tiny_grouped_grid) return mma;
    Config c;
    c.mapping = Mapping::per_head;
    c.tgs = 4;
    return c;
}

Config auto_config(const pa::DecodeShape& s) { return auto_config(s.B, s.H, s.Hkv); }

pa::DecodeVariant variant(const Config& c) {
    pa::DecodeVariant v;
    v.name = config_name(c);
    v.why_not = [c](const pa::DecodeShape& s, const pa::DeviceInfo& info) {
        std::string why = why_not(c, s);
        if (why.empty() && c.tensor_cores && info.smem_per_block_optin > 0) {
            const size_t need = grouped_mma_smem_bytes(s.D, heads_per_cta(c, s.group()), 1);  // the larger ring
            if (need + 1024 > static_cast<size_t>(info.smem_per_block_optin))
                why = pa::strf("grouped_mma stages K/V through %zu KiB of shared memory; this GPU gives a CTA %d KiB",
                               need / 1024, info.smem_per_block_optin / 1024);
        }
        return why;
    };
    v.launch = [c](const pa::PagedDecodeArgs& a, cudaStream_t st) { launch(a, c, st); };
    v.geometry = [c](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return geometry(c, s, info); };
    return v;
}

pa::DecodeVariant auto_variant() {
    pa::DecodeVariant v;
    v.name = "auto";
    v.why_not = [](const pa::DecodeShape& s, const pa::DeviceInfo&) { return why_not(auto_config(s), s); };
    v.launch = [](const pa::PagedDecodeArgs& a, cudaStream_t st) { launch(a, auto_config(a.B, a.H, a.Hkv), st); };
    v.geometry = [](const pa::DecodeShape& s, const pa::DeviceInfo& i) { return geometry(auto_config(s), s, i); };
    return v;
}

std::vector<pa::DecodeVariant> all_variants() {
    std::vector<pa::DecodeVariant> out;
    for (Mapping m : {Mapping::per_head, Mapping::grouped})
        for (int tgs : {4, 8, 16}) out.push_back(variant({m, tgs, true, true}));
    out.push_back(variant({Mapping::grouped, 8, false, false}));
    out.push_back(variant({Mapping::grouped, 8, true, false}));
    out.push_back(variant(grouped_mma_config()));
    out.push_back(auto_variant());
    return out;
}

std::vector<pa::DecodeShape> uneven_check_shapes() {
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    std::vector<int> mixed_40;  // 40 contexts of 1 .. 297 tokens, most ending inside a tile
    for (int i = 0; i < 40; ++i) mixed_40.push_back(1 + (i * 37) % 300);
    return {
        // a CTA step takes 2 * 256 / TGS tokens of a tile: 128, 64 or 32
        pa::make_shape("uneven-steps-D128", 8, 4, {1, 7, 9, 15, 17, 31, 33, 63}, 128, 16, b),
        pa::make_shape("uneven-steps-D64", 4, 2, {3, 5, 13, 65, 127, 129}, 64, 8, f),
        pa::make_shape("uneven-steps-D256", 2, 1, {11, 19, 37, 71}, 256, 32, f),
        // chunks: 8192 tokens for one head a CTA, 1024 for groups of 8, 256 for 32
        pa::make_shape("chunks-g1", 2, 2, {8193, 9001}, 128, 16, b),
        pa::make_shape("chunks-g8", 16, 2, {1024, 1025, 2500}, 128, 16, f),
        pa::make_shape("chunks-g32", 32, 1, {257, 1000}, 128, 32, b),
        pa::make_shape("chunks-g6-as-8", 12, 2, {1030, 700}, 128, 16, f),
        // 160 grouped CTAs, more than an H100 or H200 has SMs: grouped_mma's two-per-SM layout
        pa::make_shape("grid-over-sms", 8, 4, mixed_40, 128, 16, b),
    };
}

}  // namespace lesson02
