// The GPU side of a hand-off: the prefill ranks' and decode ranks' pools, the requests
// placed in them, the staging buffers, and every way lesson 07 moves the bytes:
//
//   per_token    one cudaMemcpy2DAsync per token per layer per K/V per rank pair, pool to
//                pool (the nh heads of a token are nh rows 4 KiB apart in a head-major page)
//   per_layer    gather, transfer and scatter one layer of K or V at a time
//   staged       one gather per prefill rank, one copy per rank pair, one scatter per decode rank
//   staged_peer  the same with the decode side on a second GPU (cudaMemcpyPeerAsync)
//   staged_nccl  the same through NCCL send / recv (nccl_link.h)
//
// Each rank is simulated by its own buffers: on one GPU all of them share the device,
// with two GPUs the prefill ranks sit on one and the decode ranks on the other.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device_buffer.cuh"
#include "staging.h"
#include "staging_plan.h"

namespace lesson07 {

class NcclPair;

// Makes `device` current for its lifetime and restores the previous one.
class DeviceGuard {
  public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    int previous_ = 0;
};

// The pools of every rank of one side (prefill or decode) on one device.
class SidePools {
  public:
    // side_salt tells the two sides' backgrounds apart.
    SidePools(int device, int tp, int kv_heads, int layers, int num_blocks, uint32_t side_salt);

    int device() const { return device_; }
    int tp() const { return tp_; }
    int heads() const { return heads_; }
    int layers() const { return layers_; }
    int num_blocks() const { return num_blocks_; }
    PoolRef pool(int rank) const;
    // Device pointer to one layer of K (kv 0) or V (kv 1): [num_blocks, heads, kPageSize, D].
    uint16_t* layer(int rank, int layer_kv) const;
    PoolPattern pattern(int rank, const BlockOwner* owner, const PatternRequest* requests) const;
    // Bytes one rank's pools take: 2 x layers x num_blocks x heads pages of 4 KiB.
    static int64_t rank_bytes(int kv_heads, int tp, int layers, int num_blocks);

  private:
    int device_, tp_, kv_heads_, heads_, layers_, num_blocks_;
    uint32_t salt_;
    std::vector<pa::DeviceBuffer<uint16_t>> storage_;   // [tp] each [layers_kv, num_blocks, heads, kPageSize, D]
    std::vector<pa::DeviceBuffer<void*>> layer_tables_; // [tp] each [layers_kv]
};

// Requests placed in both sides' pools, with random page tables (random permutations of
// the blocks, never the identity) and the owner map the checks read.
struct HostRequest {
    uint32_t id = 0;
    int prefix = 0;  // cached on the decode side; a multiple of kPageSize
    int tokens = 0;  // handed off: [prefix, prefix + tokens)
    std::vector<int> prefill_pages, decode_pages;
    int total() const { return prefix + tokens; }
};

class PlacedRequests {
  public:
    // Each entry is (prefix, tokens). Blocks beyond what the requests need stay unowned.
    PlacedRequests(const std::vector<std::pair<int, int>>& prefix_and_tokens, uint64_t seed, int prefill_device,
                   int decode_device);
    static int blocks_needed(const std::vector<std::pair<int, int>>& prefix_and_tokens);

    const std::vector<HostRequest>& requests() const { return requests_; }
    int num_blocks() const { return num_blocks_; }
    const int* prefill_page_table(int r) const { return prefill_tables_.get() + table_offset_[r]; }
    const int* decode_page_table(int r) const { return decode_tables_.get() + table_offset_[r]; }
    const BlockOwner* prefill_owner() const { return prefill_owner_.get(); }
    const BlockOwner* decode_owner() const { return decode_owner_.get(); }
    const PatternRequest* prefill_requests() const { return prefill_requests_.get(); }
    const PatternRequest* decode_requests() const { return decode_requests_.get(); }

  private:
    std::vector<HostRequest> requests_;
    int num_blocks_ = 0;
    std::vector<int64_t> table_offset_;
    pa::DeviceBuffer<int> prefill_tables_, decode_tables_;
    pa::DeviceBuffer<BlockOwner> prefill_owner_, decode_owner_;
    pa::DeviceBuffer<PatternRequest> prefill_requests_, decode_requests_;
};

// What a check of the decode pools found; `first` describes the first wrong element.
struct PoolCheck {
    uint64_t mismatches = 0;
    std::string first;
};

// Device memory a hand-off of `shape` needs on the prefill and on the decode device
// (the same device counts both).
struct HandoffBytes {
    int64_t prefill = 0, decode = 0;
};
HandoffBytes handoff_bytes(const StagingShape& shape, int prefix);

// One request's hand-off for one shape.
class Handoff {
  public:
    Handoff(const StagingShape& shape, int prefix, uint64_t seed, int prefill_device, int decode_device);
    ~Handoff();

    const TransferPlan& plan() const { return plan_; }
    const StagingShape& shape() const { return shape_; }
    bool two_devices() const { return prefill_.device() != decode_.device(); }
    int prefill_device() const { return prefill_.device(); }
    int decode_device() const { return decode_.device(); }

    // Data for a check (each synchronizes).
    void fill_prefill();                  // the request's tokens in the prefill pools
    void reset_decode();                  // background in the decode pools (the cached prefix included)
    void poison_staging();                // 0xff in both sides' staging
    void fill_decode_staging_expected();  // what a correct transfer leaves in the decode staging
    uint64_t check_prefill_staging();     // mismatches in what the gather wrote
    uint64_t check_decode_staging();      // mismatches in what the transfer delivered
    PoolCheck check_decode_pools();       // the hand-off's tokens in place; every other slot untouched

    // The stages, queued on `stream` (of the side's device); `layers_per_launch` is
    // plan().layers * 2 for the lesson's kernels and 1 for the per-layer baseline.
    void gather(cudaStream_t stream, int layers_per_launch);
    void transfer(cudaStream_t stream, int layers_per_launch);  // same device, or peer copies
    void transfer_nccl(NcclPair& nccl, cudaStream_t prefill_stream, cudaStream_t decode_stream);
    void scatter(cudaStream_t stream, int layers_per_launch);
    void per_token(cudaStream_t stream);  // one device only

    // Copy calls each issues.
    int64_t gather_calls(int layers_per_launch) const;
    int64_t transfer_calls(int layers_per_launch) const;
    int64_t scatter_calls(int layers_per_launch) const;
    int64_t per_token_calls() const;

    // What the launches see, for the tests: the chunks of a prefill rank's gather and of
    // a decode rank's scatter, the buffers, the placement.
    std::vector<Chunk> src_chunks(int src_rank) const;
    std::vector<Chunk> dst_chunks(int dst_rank) const;
    const PlacedRequests& placed() const { return placed_; }
    const SidePools& prefill_pools() const { return prefill_; }
    const SidePools& decode_pools() const { return decode_; }
    uint8_t* src_staging(int src_rank) { return src_staging_.at(src_rank).get(); }
    uint8_t* dst_staging(int dst_rank) { return dst_staging_.at(dst_rank).get(); }

  private:
    std::vector<StagingPattern> src_patterns(int src_rank) const;
    std::vector<StagingPattern> dst_patterns(int dst_rank) const;

    StagingShape shape_;
    TransferPlan plan_;
    PlacedRequests placed_;
    SidePools prefill_, decode_;
    std::vector<pa::DeviceBuffer<uint8_t>> src_staging_;  // [Ps] on the prefill device
    std::vector<pa::DeviceBuffer<uint8_t>> dst_staging_;  // [Pd] on the decode device: one allocation each
};

// Number of visible CUDA devices (0 when the runtime cannot see any).
int visible_devices();
// Enables peer access both ways where the hardware allows; false when it does not (peer
// copies then go through the host and are not worth measuring).
bool enable_peer_access(int a, int b);

}  // namespace lesson07
