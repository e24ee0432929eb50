// Lesson 02's variants: each step of the ladder through its own launcher (steps.h), and
// the automatic choice among them.
#include "lesson02.h"

#include <map>
#include <mutex>
#include <tuple>

#include "cuda_check.cuh"
#include "table.h"

namespace lesson02 {

namespace {

// Each step once: its name and its three entry points (steps.h), resolved from the Config's
// step by one table lookup. Steps 1-6 take the Config's TGS (and step 6 its mapping).
struct StepOps {
    const char* name;
    bool tgs_suffix;  // the CSV name ends in _tgs<N>
    std::string (*why_not)(const Config&, const pa::DecodeShape&, const pa::DeviceInfo&);
    void (*launch)(const pa::PagedDecodeArgs&, const Config&, cudaStream_t);
    pa::LaunchGeometry (*geometry)(const Config&, const pa::DecodeShape&, const pa::DeviceInfo&);
};

// A step whose launcher takes the TGS (steps 1-5), or none (steps 7-12).
#define PA_TGS_STEP(NS, NAME)                                                                                  \
    StepOps {                                                                                                  \
        NAME, true, [](const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& i) {                   \
            return NS::why_not(s, c.tgs, i); },                                                                \
            [](const pa::PagedDecodeArgs& a, const Config& c, cudaStream_t st) { NS::launch(a, c.tgs, st); }, \
            [](const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& i) { return NS::geometry(s, c.tgs, i); } \
    }
#define PA_PLAIN_STEP(NS, NAME)                                                                                      \
    StepOps {                                                                                                        \
        NAME, false, [](const Config&, const pa::DecodeShape& s, const pa::DeviceInfo& i) { return NS::why_not(s, i); }, \
            [](const pa::PagedDecodeArgs& a, const Config&, cudaStream_t st) { NS::launch(a, st); },                 \
            [](const Config&, const pa::DecodeShape& s, const pa::DeviceInfo& i) { return NS::geometry(s, i); }      \
    }

const StepOps kStepOps[] = {
    PA_TGS_STEP(step1, "thread_groups"),
    PA_TGS_STEP(step2, "wide_loads"),
    PA_TGS_STEP(step3, "grouped_logits"),
    PA_TGS_STEP(step4, "online_softmax"),
    PA_TGS_STEP(step5, "cp_async_ring"),
    StepOps{"grouped", true,  // named per_head_tgs<N> or grouped_tgs<N> by its mapping
            [](const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& i) {
                return step6::why_not(c.mapping, s, c.tgs, i);
            },
            [](const pa::PagedDecodeArgs& a, const Config& c, cudaStream_t st) { step6::launch(c.mapping, a, c.tgs, st); },
            [](const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& i) {
                return step6::geometry(c.mapping, s, c.tgs, i);
            }},
    PA_PLAIN_STEP(step7, "tile_stream"),
    PA_PLAIN_STEP(step8, "grouped_mma_qk"),
    PA_PLAIN_STEP(step9, "grouped_mma"),
    PA_PLAIN_STEP(step10, "grouped_mma_ws"),
    PA_PLAIN_STEP(step11, "grouped_mma_bulk"),
    PA_PLAIN_STEP(step12, "grouped_mma_units"),
    PA_PLAIN_STEP(step13, "grouped_mma_aligned"),
    PA_PLAIN_STEP(step14, "grouped_mma_two_streams"),
};
#undef PA_TGS_STEP
#undef PA_PLAIN_STEP
static_assert(sizeof(kStepOps) / sizeof(kStepOps[0]) == static_cast<int>(Step::grouped_mma_two_streams),
              "one entry per step, in step order");

const StepOps& ops_of(Step step) {
    const int i = static_cast<int>(step) - 1;
    if (i < 0 || i >= static_cast<int>(Step::grouped_mma_two_streams))
        throw pa::CudaError(pa::strf("lesson02: no step %d", static_cast<int>(step)));
    return kStepOps[i];
}

}  // namespace

std::string config_name(const Config& c) {
    const StepOps& ops = ops_of(c.step);
    std::string name = c.step == Step::grouped && c.mapping == Mapping::per_head ? "per_head" : ops.name;
    return ops.tgs_suffix ? name + "_tgs" + std::to_string(c.tgs) : name;
}

std::string why_not(const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return ops_of(c.step).why_not(c, s, info);
}

void launch(const pa::PagedDecodeArgs& a, const Config& c, cudaStream_t stream) { ops_of(c.step).launch(a, c, stream); }

pa::LaunchGeometry geometry(const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return ops_of(c.step).geometry(c, s, info);
}

// The rule, read off the measured steps (plots/data/<gpu>/lesson02.csv; README "The
// automatic choice"):
//  * step 10 by default: it reads K/V once for the whole group, its dot products cost next
//    to nothing, its copy warps keep the ring full, and on grids larger than the GPU two
//    CTAs share an SM. Step 9, the same math without copy warps, where step 10's ring does
//    not fit the GPU's shared memory.
//  * on sm_90, step 12 before all of them: its unit copies won over step 10 on every shape
//    measured and matched step 11 at two CTAs per SM. Where it cannot run (pages smaller than
//    its units), step 11 where step 10 would run two CTAs per SM: there its bulk rows won on
//    every shape measured; at one CTA per SM they lost on the long and large shapes (README,
//    steps 11 and 12). And step 13 before step 12 where the grid of 8-head CTAs is at least
//    1.1 times the SMs (step13::shares_sms): there its aligned copies won; on one CTA per SM
//    step 12 was faster or level. And step 14 before all where 8-head CTAs cover 0.7 to 1 times
//    the SMs on contexts of 2048 tokens or more (step14::one_per_sm): there its two streams a
//    CTA were the fastest of the three.
//  * the per-head mapping with the ring (step 6, TGS 4) for a grouped grid of fewer than
//    kMinGroupedCtas CTAs: the per-head grid's parallelism is worth more than the re-reads,
//    which the other heads' CTAs find in L2; and for a group above 32, which has no grouped
//    kernel. TGS 4 because K comes from shared memory, so a smaller group only means more
//    tokens per step and a shorter shuffle tree.
std::vector<Config> auto_preference(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const long long grouped_ctas = static_cast<long long>(s.B) * s.Hkv;
    const bool tiny_grouped_grid = grouped_ctas < kMinGroupedCtas;
    const Config per_head{Step::grouped, Mapping::per_head, 4};
    const Config wide{Step::wide_loads, Mapping::per_head, 4};
    if (tiny_grouped_grid || s.group() > 32) return {per_head, wide};
    std::vector<Config> prefs = {Config{Step::grouped_mma_ws}, Config{Step::grouped_mma},
                                 Config{Step::grouped, Mapping::grouped, 4}, per_head, wide};
    if (step10::ctas_per_sm(s, info) == 2) prefs.insert(prefs.begin(), Config{Step::grouped_mma_bulk});
    prefs.insert(prefs.begin(), Config{Step::grouped_mma_units});
    if (step13::shares_sms(s, info)) prefs.insert(prefs.begin(), Config{Step::grouped_mma_aligned});
    if (step14::one_per_sm(s, info)) prefs.insert(prefs.begin(), Config{Step::grouped_mma_two_streams});
    return prefs;
}

namespace {

Config resolve_auto(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const std::vector<Config> prefs = auto_preference(s, info);
    for (const Config& c : prefs)
        if (why_not(c, s, info).empty()) return c;
    return prefs.front();  // nothing runs: launching it reports why
}

}  // namespace

// Resolved once per (GPU, shape as the rule and the refusals see it) and kept: a launch pays a
// lookup, not the preference list's refusals again.
Config auto_config(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    using Key = std::tuple<std::string, int, int, int, int, int, int, int, int, int>;
    static std::mutex mutex;
    static std::map<Key, Config> cache;
    const Key key{info.name, info.sms, info.smem_per_block_optin, s.B, s.H, s.Hkv, s.D, s.block_size, s.max_ctx(),
                  static_cast<int>(s.dtype)};
    {
        std::lock_guard<std::mutex> lock(mutex);
        const auto it = cache.find(key);
        if (it != cache.end()) return it->second;
    }
    const Config c = resolve_auto(s, info);
    std::lock_guard<std::mutex> lock(mutex);
    cache.emplace(key, c);
    return c;
}

namespace {

// What auto needs to know of a launch: the shape, with every context at the longest one.
pa::DecodeShape shape_of(const pa::PagedDecodeArgs& a) {
    return pa::make_shape("launch", a.H, a.Hkv, std::vector<int>(a.B, a.max_ctx), a.D, a.block_size, a.dtype);
}

}  // namespace

pa::DecodeVariant variant(const Config& c) {
    pa::DecodeVariant v;
    v.name = config_name(c);
    v.why_not = [c](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return why_not(c, s, info); };
    v.launch = [c](const pa::PagedDecodeArgs& a, cudaStream_t st) { launch(a, c, st); };
    v.geometry = [c](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return geometry(c, s, info); };
    return v;
}

pa::DecodeVariant auto_variant() {
    pa::DecodeVariant v;
    v.name = "auto";
    v.why_not = [](const pa::DecodeShape& s, const pa::DeviceInfo& info) { return why_not(auto_config(s, info), s, info); };
    v.launch = [](const pa::PagedDecodeArgs& a, cudaStream_t st) {
        launch(a, auto_config(shape_of(a), pa::current_device_info()), st);
    };
    v.geometry = [](const pa::DecodeShape& s, const pa::DeviceInfo& i) { return geometry(auto_config(s, i), s, i); };
    return v;
}

std::vector<pa::DecodeVariant> all_variants() {
    std::vector<pa::DecodeVariant> out;
    for (Step step : {Step::thread_groups, Step::wide_loads})
        for (int tgs : {4, 8, 16}) out.push_back(variant({step, Mapping::per_head, tgs}));
    for (Step step : {Step::grouped_logits, Step::online_softmax, Step::cp_async_ring})
        out.push_back(variant({step, Mapping::grouped, 8}));  // one idea each: TGS 8 only
    for (Mapping m : {Mapping::per_head, Mapping::grouped})
        for (int tgs : {4, 8, 16}) out.push_back(variant({Step::grouped, m, tgs}));
    out.push_back(variant({Step::tile_stream}));
    out.push_back(variant({Step::grouped_mma_qk}));
    out.push_back(variant({Step::grouped_mma}));
    out.push_back(variant({Step::grouped_mma_ws}));
    out.push_back(variant({Step::grouped_mma_bulk}));
    out.push_back(variant({Step::grouped_mma_units}));
    out.push_back(variant({Step::grouped_mma_aligned}));
    out.push_back(variant({Step::grouped_mma_two_streams}));
    out.push_back(auto_variant());
    return out;
}

std::vector<pa::DecodeShape> uneven_check_shapes() {
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    std::vector<int> mixed_40;  // 40 contexts of 1 .. 297 tokens, most ending inside a tile
    for (int i = 0; i < 40; ++i) mixed_40.push_back(1 + (i * 37) % 300);
    return {
        // tokens per CTA step: 128 / TGS (steps 1-2), 2 * 256 / TGS (step 6): never a multiple here
        pa::make_shape("uneven-steps-D128", 8, 4, {1, 7, 9, 15, 17, 31, 33, 63}, 128, 16, b),
        pa::make_shape("uneven-steps-D64", 4, 2, {3, 5, 13, 65, 127, 129}, 64, 8, f),
        pa::make_shape("uneven-steps-D256", 2, 1, {11, 19, 37, 71}, 256, 32, f),
        // step 6's chunks: 8192 tokens for one head a CTA, 1024 for groups of 8, 256 for 32
        pa::make_shape("chunks-g1", 2, 2, {8193, 9001}, 128, 16, b),
        pa::make_shape("chunks-g8", 16, 2, {1024, 1025, 2500}, 128, 16, f),
        pa::make_shape("chunks-g32", 32, 1, {257, 1000}, 128, 32, b),
        pa::make_shape("chunks-g6-as-8", 12, 2, {1030, 700}, 128, 16, f),
        // 160 grouped CTAs, more than an H100 or H200 has SMs: step 10's two-per-SM layout
        pa::make_shape("grid-over-sms", 8, 4, mixed_40, 128, 16, b),
    };
}

}  // namespace lesson02
