// Lesson 06's GPU side, as main.cu and the tests use it: a prefill batch on the device, the
// ladder of steps (each with both policies), and their launchers. Compiled once in lesson06.cu
// (steps 1-2, every architecture from sm_80) and in the sm_90a objects (steps 3-16).
//
//   step 1  as_decode         each new token a decode of its own: lesson 03's decode (softmax), lesson 05's (gate)
//   step 2  mma_sync          64-row query tiles on mma.sync.m16n8k16 (FlashAttention-2 style), sm_80+
//   step 3  wgmma             128-row tiles on wgmma m64n128k16 from shared memory, cp.async, sm_90a
//   step 4  wgmma_swizzle     + the 128-byte swizzled shared-memory layout (still cp.async), sm_90a
//   step 5  wgmma_tma         + K/V pages and Q through the copy engine (TMA), mbarriers, sm_90a
//   step 6  wgmma_producer    + a producer warp over a ring of 3 slots, two consumer warpgroups, sm_90a
//   step 7  wgmma_setmaxnreg  + registers moved from the producer to the consumers, sm_90a
//   step 8  wgmma_overlap     + the policy on S_j beside the warpgroup's own P_{j-1} V_{j-1}, sm_90a
//   step 9  wgmma_ws          + the consumers take turns on the tensor cores (ping-pong), sm_90a
//   step 10 wgmma_persistent  + one CTA per SM walking the work list, the next item loaded early, sm_90a
//   step 11 wgmma_fast_exp2   + the softmax's 2^x as one MUFU.EX2 (ex2.approx.ftz), sm_90a
//   step 12 wgmma_early_start + the next item's first K tile and description fetched early, sm_90a
//   step 13 wgmma_lazy_rescale + the output rescaled only when a row's max rises by more than 2^8, sm_90a
//   step 14 wgmma_diagonal_mask + the causal mask compiled only into the diagonal tiles, sm_90a
//   step 15 wgmma_paired_stores + the output stored 8 bytes a lane, in whole 32-byte sectors, sm_90a
//   step 16 wgmma_q_registers + each consumer's Q rows in registers, Q's buffer free for the next item, sm_90a
//   step 17 wgmma_work_ahead  + the consumers read the work list two items ahead, sm_90a
//   step 18 wgmma_tma_store   + the output through shared memory and the copy engine, sm_90a
//   step 19 wgmma_folded_gate + the gate's constants folded: two FFMAs a weight (the softmax as step 18), sm_90a
//   step 20 wgmma_tree_max    + the softmax's row max as a tree, not a chain (the gate as step 19), sm_90a
//   step 21 wgmma_v_pages     + each page of V in one copy (both 64-dim halves), sm_90a
//
// Variant names are <method>_<policy>: as_decode_softmax, mma_sync_gate, wgmma_ws_softmax, ...
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "decode_args.h"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "prefill_problem.h"

namespace lesson06 {

enum class Method {
    as_decode = 1,
    mma_sync = 2,
    wgmma = 3,
    wgmma_swizzle = 4,
    wgmma_tma = 5,
    wgmma_producer = 6,
    wgmma_setmaxnreg = 7,
    wgmma_overlap = 8,
    wgmma_ws = 9,
    wgmma_persistent = 10,
    wgmma_fast_exp2 = 11,
    wgmma_early_start = 12,
    wgmma_lazy_rescale = 13,
    wgmma_diagonal_mask = 14,
    wgmma_paired_stores = 15,
    wgmma_q_registers = 16,
    wgmma_work_ahead = 17,
    wgmma_tma_store = 18,
    wgmma_folded_gate = 19,
    wgmma_tree_max = 20,
    wgmma_v_pages = 21
};
// The ladder's last step: what --floor measures (mma_floor.cu instantiates its kernel).
constexpr Method kLastStep = Method::wgmma_v_pages;
const char* method_name(Method m);  // "as_decode", "mma_sync", "wgmma", ..., "wgmma_v_pages"

// What every launcher gets. Pointers are device pointers unless said otherwise.
struct PrefillArgs {
    void* out = nullptr;              // [total_new, H, D] bf16
    const void* q = nullptr;          // [total_new, H, D] bf16
    const void* k_cache = nullptr;    // [num_blocks, Hkv, 16, D] bf16
    const void* v_cache = nullptr;
    const int* block_table = nullptr; // [B, max_blocks_per_seq]
    const int* prefix_lens = nullptr; // [B]
    const int* new_lens = nullptr;    // [B]
    const int* q_start = nullptr;     // [B + 1]
    const QueryTile* tiles64 = nullptr;   // query tiles of 64 rows (step 2), longest first
    const QueryTile* tiles128 = nullptr;  // of 128 rows (steps 3 to 9)
    int num_tiles64 = 0, num_tiles128 = 0;
    int B = 0, H = 0, Hkv = 0, max_blocks_per_seq = 0, num_blocks = 0;
    long long total_new = 0;
    float scale = 0;                  // 1 / sqrt(D)
    float gamma = 1, sigma = 1.5f;    // the gate's parameters
    pa::PagedDecodeArgs as_decode;    // step 1: the same batch as total_new decodes
};

// A problem's tensors on the GPU; K and V in `copies` identical copies for the L2-cold timing.
class DevicePrefillProblem {
  public:
    explicit DevicePrefillProblem(const PrefillProblem& p, int copies = 1);
    PrefillArgs args(const GateSetting& g, int copy = 0);
    void poison_output() { out_.fill_bytes(0xff); }  // NaN everywhere
    std::vector<uint16_t> download_output() const { return out_.download(); }
    int copies() const { return static_cast<int>(k_.size()); }
    long long kv_pool_bytes() const { return static_cast<long long>(k_[0].bytes() + v_[0].bytes()); }

  private:
    PrefillShape shape_;
    int max_blocks_per_seq_ = 0, num_blocks_ = 0;
    float scale_ = 0;
    pa::DeviceBuffer<uint16_t> q_, out_;
    pa::DeviceBuffer<int> block_table_, prefix_, new_, q_start_;
    pa::DeviceBuffer<QueryTile> tiles64_, tiles128_;
    std::vector<pa::DeviceBuffer<uint16_t>> k_, v_;
    // step 1's metadata: one decode per new token (built once per batch, as a server would)
    pa::DeviceBuffer<int> decode_table_, decode_ctx_;
    std::vector<int> decode_ctx_host_;
    int decode_max_ctx_ = 0;
};

struct PrefillVariant {
    std::string name;        // "<method>_<policy>"
    Method method = Method::mma_sync;
    Policy policy = Policy::softmax;
    int min_cc = 80;         // 90 for the sm_90a steps
    std::string needs;       // "sm_80", "sm_90a (wgmma)", "sm_90a (wgmma, TMA)", ...
    std::string not_built;   // non-empty: this build has no such kernel; one line saying why
};

// Every step with both policies, in ladder order (those this build lacks carry not_built).
std::vector<PrefillVariant> all_variants();
// Empty when the variant can run the shape on this GPU, else the reason (one line).
std::string why_not(const PrefillVariant& v, const PrefillShape& s, const pa::DeviceInfo& info);
// Launches asynchronously on `stream`; throws pa::CudaError if the variant cannot run here.
void launch(const PrefillVariant& v, const PrefillArgs& a, cudaStream_t stream);

struct Geometry {
    long long ctas = 0;   // CTAs of the main kernel
    int threads = 0;      // per CTA
    int smem_bytes = 0;   // dynamic shared memory per CTA
    int ctas_per_sm = 0;  // resident at once
};
Geometry geometry(const PrefillVariant& v, const PrefillShape& s);

// The default shape sets: the check's (small and awkward: prompts of 1 .. 300 tokens, prefixes 0
// and not multiples of 16, mixed lengths, groups 1, 2 and 8; the sanitizer runs them) and the
// measurement's (the post's B32-T256-H8-Hkv4, longer prompts, two with a prefix of 1024).
std::vector<PrefillShape> check_shapes();
std::vector<PrefillShape> bench_shapes();

}  // namespace lesson06
