#include "server_loop.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "cuda_check.cuh"
#include "handoff.h"
#include "random.h"
#include "staging_ring.h"
#include "table.h"

namespace lesson07 {

namespace {

// What the decode side's completion thread shares with the prefill side: the requests
// still being scattered, and a failure seen on that thread.
struct Completions {
    std::mutex m;
    std::condition_variable cv;
    int in_flight = 0;
    std::string failure;
};

// Handed to the decode stream's host callback, which runs on a CUDA driver thread once the
// request's scatters have finished: it frees the request's allocations there, so that
// allocation (the main thread) and free (that thread) really come from two threads.
struct FreeAfterScatter {
    std::vector<StagingRing*> rings;
    std::vector<int64_t> ids;
    Completions* done = nullptr;
};

void CUDART_CB free_after_scatter(void* arg) {
    std::unique_ptr<FreeAfterScatter> f(static_cast<FreeAfterScatter*>(arg));
    {
        // under the same lock the prefill side checks the watermark with: no lost wake-up
        std::lock_guard<std::mutex> lock(f->done->m);
        try {
            for (size_t d = 0; d < f->rings.size(); ++d) f->rings[d]->free(f->ids[d]);
        } catch (const std::exception& e) {  // a host callback must not throw
            if (f->done->failure.empty()) f->done->failure = e.what();
        }
        --f->done->in_flight;
    }
    f->done->cv.notify_all();
}

// Both streams; the destructor waits for them (and their callbacks) before anything the
// callbacks touch goes away.
class Streams {
  public:
    Streams() {
        CUDA_CHECK(cudaStreamCreateWithFlags(&prefill, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&decode, cudaStreamNonBlocking));
    }
    ~Streams() {
        cudaStreamSynchronize(prefill);
        cudaStreamSynchronize(decode);
        cudaStreamDestroy(prefill);
        cudaStreamDestroy(decode);
    }
    cudaStream_t prefill = nullptr, decode = nullptr;
};

constexpr auto kWaitBudget = std::chrono::seconds(120);  // a wait this long is a hang

}  // namespace

ServerLoopResult run_server_loop(const ServerLoopConfig& cfg) {
    validate(cfg.tp);
    if (cfg.requests < 1 || cfg.max_tokens < 1 || cfg.layers < 1 || cfg.ring_allocations < 1.0)
        throw PlanError("server loop: requests, max_tokens and layers must be positive and the ring at least one allocation");
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const TpConfig& tp = cfg.tp;

    // Requests: random lengths, each with a random cached prefix of whole pages.
    pa::Rng rng(cfg.seed, 0x5e7);
    std::vector<std::pair<int, int>> prefix_and_tokens;
    for (int r = 0; r < cfg.requests; ++r) {
        const int total = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(cfg.max_tokens)));
        const int prefix = kPageSize * static_cast<int>(rng.below(static_cast<uint64_t>((total - 1) / kPageSize) + 1));
        prefix_and_tokens.push_back({prefix, total - prefix});
    }
    const PlacedRequests placed(prefix_and_tokens, cfg.seed, device, device);
    SidePools prefill(device, tp.prefill_tp, tp.kv_heads, cfg.layers, placed.num_blocks(), 1);
    SidePools decode(device, tp.decode_tp, tp.kv_heads, cfg.layers, placed.num_blocks(), 2);

    std::vector<TransferPlan> plans;
    int64_t largest_allocation = 0, largest_staging = 0;
    for (const auto& q : placed.requests()) {
        plans.push_back(make_transfer_plan(tp, cfg.layers, q.tokens));
        largest_allocation = std::max(largest_allocation, plans.back().dst_allocation_bytes[0]);
        for (int64_t b : plans.back().src_staging_bytes) largest_staging = std::max(largest_staging, b);
    }

    ServerLoopResult res;
    res.requests = cfg.requests;
    const int64_t align = 256;
    res.ring_bytes = std::max(largest_allocation,
                              static_cast<int64_t>(cfg.ring_allocations * static_cast<double>(largest_allocation))) / align * align + align;
    std::vector<std::unique_ptr<StagingRing>> rings;
    std::vector<pa::DeviceBuffer<uint8_t>> ring_memory, prefill_staging;
    for (int d = 0; d < tp.decode_tp; ++d) {
        rings.push_back(std::make_unique<StagingRing>(res.ring_bytes, align));
        ring_memory.emplace_back(static_cast<size_t>(res.ring_bytes));
    }
    // One send buffer per prefill rank, reused by every request: the next gather into it
    // is queued on the same stream as the copies that read it, so it cannot start before
    // they have finished.
    for (int s = 0; s < tp.prefill_tp; ++s) prefill_staging.emplace_back(static_cast<size_t>(largest_staging));

    for (int s = 0; s < tp.prefill_tp; ++s)
        fill_pool(prefill.pattern(s, placed.prefill_owner(), placed.prefill_requests()), PoolContent::prefill);
    for (int d = 0; d < tp.decode_tp; ++d)
        fill_pool(decode.pattern(d, placed.decode_owner(), placed.decode_requests()), PoolContent::background);
    CUDA_CHECK(cudaDeviceSynchronize());

    Completions done;
    Streams streams;
    for (int r = 0; r < cfg.requests && res.failure.empty(); ++r) {
        const HostRequest& q = placed.requests()[r];
        const TransferPlan& plan = plans[r];
        res.tokens += q.tokens;

        // decode side: a region in every decode rank's ring
        std::vector<RingAllocation> alloc;
        for (int d = 0; d < tp.decode_tp; ++d) {
            AllocStatus st{};
            const auto a = rings[d]->allocate(plan.dst_allocation_bytes[d], &st);
            if (!a) throw PlanError(pa::strf("server loop: request %d refused by decode rank %d's ring", r, d));
            alloc.push_back(*a);
        }
        // prefill side: wait for the watermark of each ring to pass the allocation
        {
            std::unique_lock<std::mutex> lock(done.m);
            const auto deadline = std::chrono::steady_clock::now() + kWaitBudget;
            for (int d = 0; d < tp.decode_tp && res.failure.empty(); ++d) {
                while (!prefill_may_write(alloc[d], rings[d]->watermark())) {
                    if (done.in_flight == 0) {
                        res.failure = pa::strf("request %d waits forever on decode rank %d: nothing left to free", r, d);
                        break;
                    }
                    ++res.waits;
                    if (done.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
                        res.failure = pa::strf("request %d waited %lld s on decode rank %d", r,
                                               static_cast<long long>(kWaitBudget.count()), d);
                        break;
                    }
                }
            }
            if (res.failure.empty() && !done.failure.empty()) res.failure = done.failure;
        }
        if (!res.failure.empty()) break;

        // gather and send, on the prefill stream
        for (int s = 0; s < tp.prefill_tp; ++s) {
            std::vector<Chunk> chunks;
            for (int i : plan.pairs_of_src[s]) {
                const TransferPair& p = plan.pairs[i];
                chunks.push_back({p.slice.src_head_start, p.slice.num_heads, p.src_offset});
            }
            launch_gather(prefill.pool(s), placed.prefill_page_table(r), q.prefix, q.tokens, chunks,
                          prefill_staging[s].get(), 0, 2 * cfg.layers, streams.prefill);
        }
        for (const TransferPair& p : plan.pairs)
            CUDA_CHECK(cudaMemcpyAsync(ring_memory[p.dst_rank].get() + alloc[p.dst_rank].offset + p.dst_offset,
                                       prefill_staging[p.src_rank].get() + p.src_offset, static_cast<size_t>(p.bytes),
                                       cudaMemcpyDeviceToDevice, streams.prefill));
        cudaEvent_t landed;
        CUDA_CHECK(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(landed, streams.prefill));
        CUDA_CHECK(cudaStreamWaitEvent(streams.decode, landed, 0));
        CUDA_CHECK(cudaEventDestroy(landed));  // the wait above keeps what it needs

        // scatter, on the decode stream
        if (cfg.stall_every > 0 && r % cfg.stall_every == 0) launch_busy_wait(cfg.stall_ns, streams.decode);
        auto f = std::make_unique<FreeAfterScatter>();
        f->done = &done;
        for (int d = 0; d < tp.decode_tp; ++d) {
            std::vector<Chunk> chunks;
            for (int i : plan.pairs_of_dst[d]) {
                const TransferPair& p = plan.pairs[i];
                chunks.push_back({p.slice.dst_head_start, p.slice.num_heads, alloc[d].offset + p.dst_offset});
            }
            launch_scatter(decode.pool(d), placed.decode_page_table(r), q.prefix, q.tokens, chunks, ring_memory[d].get(), 0,
                           2 * cfg.layers, streams.decode);
            f->rings.push_back(rings[d].get());
            f->ids.push_back(alloc[d].id);
        }
        // free only once the scatters have read the ring: the callback runs after them
        {
            std::lock_guard<std::mutex> lock(done.m);
            ++done.in_flight;
        }
        CUDA_CHECK(cudaLaunchHostFunc(streams.decode, free_after_scatter, f.get()));
        (void)f.release();  // the callback owns it now
    }
    CUDA_CHECK(cudaStreamSynchronize(streams.prefill));
    CUDA_CHECK(cudaStreamSynchronize(streams.decode));  // also waits for the callbacks
    if (res.failure.empty() && !done.failure.empty()) res.failure = done.failure;

    res.rounds = INT64_MAX;
    for (int d = 0; d < tp.decode_tp; ++d) {
        if (rings[d]->live_count() != 0 && res.failure.empty())
            res.failure = pa::strf("decode rank %d's ring still holds %lld allocations", d, static_cast<long long>(rings[d]->live_count()));
        res.rounds = std::min(res.rounds, rings[d]->round());
    }
    for (int d = 0; d < tp.decode_tp; ++d) {
        const PoolPattern p = decode.pattern(d, placed.decode_owner(), placed.decode_requests());
        const Mismatches m = count_pool_mismatches(p, PoolContent::decode_after);
        if (m.count && res.first.empty()) res.first = pa::strf("decode rank %d: ", d) + describe_pool_element(p, m.first);
        res.mismatches += m.count;
    }
    return res;
}

}  // namespace lesson07
