// Lesson 02's variants, as main.cu and the tests run them: the thirteen steps of the ladder
// (steps.h has each step's launcher), the automatic choice, and the check shapes that
// catch the group-mask trap. Compiled once in lesson02.cu.
#pragma once

#include <string>
#include <vector>

#include "decode_driver.cuh"
#include "steps.h"

namespace lesson02 {

// One rung of the ladder, with its parameters.
enum class Step {
    thread_groups = 1,  // step 1: TGS lanes per token, group mask (per head, as lesson 01)
    wide_loads = 2,     // step 2: + 16-byte K loads, q in registers
    grouped_logits = 3, // step 3: + one CTA per KV head serving the group, its logits in shared memory
    online_softmax = 4, // step 4: + the context in chunks, running max and sum
    cp_async_ring = 5,  // step 5: + K/V staged through a cp.async ring
    grouped = 6,        // step 6: + 16-byte V reads by their owners, 256 threads
    tile_stream = 7,    // step 7: + K0 V0 K1 V1 ... through a ring of 16 KiB tiles, softmax per tile
    grouped_mma_qk = 8, // step 8: + the q.K products on tensor cores (mma.sync)
    grouped_mma = 9,    // step 9: + the PV products on tensor cores too
    grouped_mma_ws = 10, // step 10: + producer and consumer warps (mbarriers)
    grouped_mma_bulk = 11,  // step 11: + one bulk copy per row, counted by the barrier (sm_90)
    grouped_mma_units = 12, // step 12: + one bulk copy per 16-token unit of a page (sm_90)
    grouped_mma_aligned = 13, // step 13: + the units land 128-byte aligned, read without conflicts (sm_90)
    grouped_mma_two_streams = 14, // step 14: + two streams a CTA, each half the tiles, merged at the end (sm_90)
};

struct Config {
    Step step = Step::grouped_mma_ws;
    Mapping mapping = Mapping::grouped;  // step 6 only: per_head or grouped
    int tgs = 4;                         // steps 1-6: THREAD_GROUP_SIZE 4, 8 or 16
};

// CSV variant names: thread_groups_tgs8, wide_loads_tgs4, grouped_logits_tgs8,
// online_softmax_tgs8, cp_async_ring_tgs8, per_head_tgs4, grouped_tgs16, tile_stream,
// grouped_mma_qk, grouped_mma,
// grouped_mma_ws, grouped_mma_bulk, grouped_mma_units, grouped_mma_aligned, grouped_mma_two_streams.
std::string config_name(const Config& c);

// Empty if the configuration can run the shape on this GPU, otherwise why not.
std::string why_not(const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, const Config& c, cudaStream_t stream);
pa::LaunchGeometry geometry(const Config& c, const pa::DecodeShape& s, const pa::DeviceInfo& info);

// The automatic choice (the rule is stated in the README): the first configuration of
// the preference list that can run the shape on this GPU.
//   * a grouped grid of fewer than kMinGroupedCtas CTAs (MQA with one to three sequences),
//     or a group above 32: per_head_tgs4, then wide_loads_tgs4;
//   * otherwise grouped_mma_ws, then grouped_mma (GPUs whose shared memory is too small
//     for step 10's ring), then grouped_tgs4; with grouped_mma_bulk (sm_90) first where
//     step 10 runs two CTAs per SM (8 heads a CTA, more grouped CTAs than SMs), and
//     grouped_mma_units (sm_90, pages of at least one unit) before everything, and
//     grouped_mma_aligned before that where the grid of 8-head CTAs is at least 1.1 times
//     the SMs, grouped_mma_two_streams before all where it is 0.7 to 1 times the SMs and the
//     longest context has at least 2048 tokens.
constexpr int kMinGroupedCtas = 4;
std::vector<Config> auto_preference(const pa::DecodeShape& s, const pa::DeviceInfo& info);
Config auto_config(const pa::DecodeShape& s, const pa::DeviceInfo& info);

pa::DecodeVariant variant(const Config& c);
pa::DecodeVariant auto_variant();  // named `auto`

// Every step (steps 1, 2 and 6 at TGS 4, 8, 16, steps 3-5 at TGS 8; step 6 in both
// mappings; steps 7 to 14 once each), then auto.
std::vector<pa::DecodeVariant> all_variants();

// Shapes that catch the group-mask trap and the chunk walk: contexts that are not a
// multiple of the tokens one CTA step handles for every TGS, contexts that cross one or
// more chunks for small and large groups, and a grid larger than the GPU (step 10's two
// CTAs per SM).
std::vector<pa::DecodeShape> uneven_check_shapes();

}  // namespace lesson02
