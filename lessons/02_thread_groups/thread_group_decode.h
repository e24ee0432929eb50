// Lesson 02's host interface: the kernel configurations, their launcher, the automatic
// choice, and the variants as the decode driver runs them. Compiled once in
// thread_group_decode.cu; main.cu and the tests use this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "decode_args.h"
#include "decode_driver.cuh"

namespace lesson02 {

enum class Mapping {
    per_head,  // one CTA per (sequence, query head), as in lesson 01: grid (H, B)
    grouped,   // one CTA per (sequence, KV head) serving its `group` query heads: grid (Hkv, B)
};

struct Config {
    Mapping mapping = Mapping::grouped;
    int tgs = 8;          // THREAD_GROUP_SIZE: 4, 8 or 16
    bool wide_k = true;   // 16-byte K loads (false: 2-byte loads; ablation, grouped TGS 8, D 128 only)
    bool q_regs = true;   // q slice in registers (false: shared memory; ablation, as above)
    // The grouped CTA with both dot products on tensor cores (mma.sync); tgs is unused.
    bool tensor_cores = false;
};

// The tensor-core grouped configuration (CSV name grouped_mma).
Config grouped_mma_config();

// CSV variant names: per_head_tgs8, grouped_tgs16, grouped_tgs8_scalar_k, grouped_tgs8_q_smem,
// grouped_mma.
std::string config_name(const Config& c);

// Query heads one CTA computes (the kernel's GROUP_MAX): 1 per head; for grouped, the
// group rounded up to 1, 2, 4, 8 or 32 (a group of 6 runs as 8 with two heads idle); for
// grouped_mma, rounded up to 8, 16 or 32 (whole mma columns).
int heads_per_cta(const Config& c, int group);

// Empty if the configuration can run the shape, otherwise why not.
std::string why_not(const Config& c, const pa::DecodeShape& s);

void launch(const pa::PagedDecodeArgs& a, const Config& c, cudaStream_t stream);

pa::LaunchGeometry geometry(const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& info);

// The automatic choice of kernel (the rule is stated in the lesson README): grouped_mma,
// except per_head_tgs4 for grouped grids below this many CTAs and for groups above 32.
constexpr int kMinGroupedCtas = 4;
Config auto_config(int B, int H, int Hkv);
Config auto_config(const pa::DecodeShape& s);

pa::DecodeVariant variant(const Config& c);
pa::DecodeVariant auto_variant();  // named `auto`

// grouped_mma's CTAs per SM for a padded group and a grid: two (a 3-slot ring each) when
// one 8-head column block serves a grid larger than the GPU, else one (the deepest ring).
int grouped_mma_ctas_per_sm(int group_n, long long ctas, int sms);

// Defined in grouped_mma_decode.cu: the tensor-core kernel for a dtype, D, padded group
// and CTAs per SM (nullptr if none is built), its dynamic shared memory (0 if none), its
// CTA size.
const void* grouped_mma_kernel(pa::DType t, int head_size, int group_n, int ctas_per_sm);
size_t grouped_mma_smem_bytes(int head_size, int group_n, int ctas_per_sm);
int grouped_mma_threads();
// The same for the timeline build (timeline.h): D 128 only.
const void* grouped_mma_timeline_kernel(pa::DType t, int head_size, int group_n, int ctas_per_sm);

// grouped_mma with its timeline: the launch `launch(a, grouped_mma_config())` makes, with
// the kernel's timeline build writing timeline[B * Hkv][timeline_stride] (timeline.h).
// Empty if the timeline build can run the shape, otherwise why not.
std::string grouped_mma_timeline_why_not(const pa::DecodeShape& s);
void launch_grouped_mma_timeline(const pa::PagedDecodeArgs& a, uint64_t* timeline, int timeline_stride, cudaStream_t stream);
int grouped_mma_tile_tokens(int head_size);  // tokens per staged tile

// per_head and grouped for TGS 4, 8, 16; the two ablation steps; grouped_mma; auto.
std::vector<pa::DecodeVariant> all_variants();

// Shapes that catch the group-mask trap and the chunk walk: contexts that are not a
// multiple of the tokens one CTA step handles (128 / TGS, times the unroll) for every
// TGS, contexts that cross one or more chunks for small and large groups, and a grid
// larger than the GPU (grouped_mma's two CTAs per SM).
std::vector<pa::DecodeShape> uneven_check_shapes();

}  // namespace lesson02
