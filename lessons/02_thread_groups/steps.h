// Lesson 02's steps, host side: what each can run, its launcher and its launch geometry.
// Each step's instantiations compile once, in its stepN_*.cu; main.cu and the tests use
// this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "decode_args.h"
#include "decode_driver.cuh"

namespace lesson02 {
enum class Mapping {
    per_head,  // one CTA per (sequence, query head), as in lesson 01: grid (H, B)
    grouped,   // one CTA per (sequence, KV head) serving its `group` query heads: grid (Hkv, B)
};
}  // namespace lesson02

// Step 1: thread groups (TGS lanes per token, group-masked shuffle), 2-byte K loads, q in
// shared memory; one CTA per (sequence, query head) and every logit in shared memory.
namespace lesson02::step1 {
// "" if the step can run the shape at this TGS on this GPU; else one line saying why not.
std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
}  // namespace lesson02::step1

// Step 2: step 1 with 16-byte K loads and the q slice in registers.
namespace lesson02::step2 {
std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
}  // namespace lesson02::step2

// Steps 3 to 5: one CTA of 128 threads per (sequence, KV head) serving the whole group
// (built at TGS 8). Step 3: every head's logits of the whole context in shared memory; step
// 4: + the online softmax over chunks; step 5: + K/V staged through a cp.async ring.
namespace lesson02::step3 {
std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
}  // namespace lesson02::step3
namespace lesson02::step4 {
std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
}  // namespace lesson02::step4
namespace lesson02::step5 {
std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
}  // namespace lesson02::step5

// Step 6: step 5 with 16-byte V reads by the threads that own 8 dims of a few heads, and 256
// threads, TGS lanes per token; in the per-head mapping, the same kernel serving one query
// head a CTA.
namespace lesson02::step6 {
// Query heads one CTA serves: 1 per head; for grouped, the group rounded up to 1, 2, 4, 8
// or 32 (a group of 6 runs as 8 with two heads idle); 0 for a group above 32.
int heads_per_cta(Mapping m, int group);
std::string why_not(Mapping m, const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
void launch(Mapping m, const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream);
pa::LaunchGeometry geometry(Mapping m, const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info);
}  // namespace lesson02::step6

// Step 7: the grouped CTA of step 6 (TGS 8, CUDA cores) with K0 V0 K1 V1 ... streamed through
// one ring of 16 KiB tiles and the softmax step on each token tile: fits 99 KiB a CTA.
namespace lesson02::step7 {
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
}  // namespace lesson02::step7

// Step 8: step 7 with the q.K products on tensor cores (heads rounded up to 8, 16 or 32).
namespace lesson02::step8 {
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
}  // namespace lesson02::step8

// Step 9: the GQA-grouped CTA (one per sequence and KV head) with both GEMMs on tensor
// cores (step 8 with the PV products on them too); every warp copies and computes.
namespace lesson02::step9 {
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
}  // namespace lesson02::step9

// Step 10: step 9 with producer warps that only copy and consumer warps that only compute,
// meeting at mbarriers; two CTAs per SM on grids larger than the GPU.
namespace lesson02::step10 {
// Heads one CTA computes: the group rounded up to 8, 16 or 32 (whole mma columns); 0 above 32.
int heads_per_cta(int group);
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
int tile_tokens(int head_size);  // tokens per staged tile (the timeline's unit)
// The layout the shape runs at on this GPU: 2 (two 3-slot rings per SM) or 1 (one deep ring);
// step 11 runs the same (step 12 has its own rule).
int ctas_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info);
// The timeline build (common/timeline.h): the launch `launch` makes, with the kernel's
// TIMELINE build writing timeline[B * Hkv][timeline_stride]. "" if it can run the shape.
std::string timeline_why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch_timeline(const pa::PagedDecodeArgs& a, uint64_t* timeline, int timeline_stride, cudaStream_t stream);
}  // namespace lesson02::step10

// Step 11: step 10 with each row of a tile one bulk copy (sm_90's copy engine) whose bytes the
// ring's barrier counts, so the producers wait only for free slots, never for their copies.
namespace lesson02::step11 {
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
}  // namespace lesson02::step11

// Step 12: step 11 with one bulk copy per 16-token unit of a page (8 at D 256), the mma reading
// the tile in a unit-interleaved order; sm_90, pages of at least one unit.
namespace lesson02::step12 {
// Step 10's layout rule, and the shallow ring (the two-per-SM layout, 3 slots) also when one
// 8-head column block's grid covers 90 % of the SMs: with every SM streaming, a 6-slot ring
// of unit copies puts more bytes in flight than the memory serves best (README, step 12).
int ctas_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info);
// "" when pages hold whole units (a unit never straddles two pages), else why not.
std::string pages_why_not(int D, int block_size);
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
}  // namespace lesson02::step12

// Step 13: step 12 with its units landing 128-byte aligned, K read by the lanes' own 16-byte
// loads and V moved to a padded work tile, both without bank conflicts; sm_90, as step 12.
namespace lesson02::step13 {
// Where `auto` takes step 13 before step 12: a grid of 8-head CTAs at least kGridOverSms times
// the SMs, so that the two-per-SM layout puts two CTAs on a tenth of the SMs or more. Where
// every CTA streams alone, step 13's own loads and the V tile's move cost more than its aligned
// copies gain; just past one CTA per SM the two were level (README, step 13; NOTES).
constexpr double kGridOverSms = 1.1;
bool shares_sms(const pa::DecodeShape& s, const pa::DeviceInfo& info);
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
}  // namespace lesson02::step13

// Step 14: two of step 13's CTAs in one (two streams, each half the context's tiles), merged in
// shared memory at the end; for grids that leave each SM one CTA. sm_90, 8 heads a CTA.
namespace lesson02::step14 {
// Where `auto` takes step 14 first: a grid of 8-head CTAs from kMinGridOfSms to 1 times the SMs
// (each SM one CTA at most, most SMs busy) whose longest context is at least kMinContext
// tokens. There it was the fastest of steps 12 to 14; on shorter contexts the two streams'
// extra start and merge cost more than the second chain gains, and on smaller grids step 12's
// deep ring alone on its SM was faster (README, step 14; NOTES).
constexpr double kMinGridOfSms = 0.7;
constexpr int kMinContext = 2048;
bool one_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info);
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream);
pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info);
}  // namespace lesson02::step14
