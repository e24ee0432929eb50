// Lesson 07 (KV staging) on the GPU: gather, transfer and scatter for every TP pair,
// compared bit for bit with what the host computes from the plan alone (kv_pattern.h's
// values, the page tables, each rank's heads), plus the baselines, the server loop and the
// launchers' refusals. Every test here is labelled `gpu` by CMake.
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "device_info.cuh"
#include "handoff.h"
#include "kv_pattern.h"
#include "nccl_link.h"
#include "server_loop.h"
#include "staging.h"
#include "staging_plan.h"

namespace {

using namespace lesson07;

constexpr uint64_t kSeed = 20250707;

pa::DeviceInfo gpu_for_test() {
    std::string why;
    if (!pa::gpu_available(&why)) FAIL("no usable CUDA GPU (" << why << "); the gpu-labelled tests need one");
    return pa::require_gpu("tests");
}

std::vector<uint16_t> download(const void* p, size_t elems) {
    std::vector<uint16_t> h(elems);
    if (elems) CUDA_CHECK(cudaMemcpy(h.data(), p, elems * 2, cudaMemcpyDefault));
    return h;
}

// The TP pairs of the table and the awkward ones: fan-in, fan-out, equal, replicated
// heads on either side or both.
const std::vector<TpConfig> kPairs = {{4, 2, 8}, {2, 4, 8}, {1, 4, 2}, {8, 2, 2}, {2, 8, 4},
                                      {4, 1, 8}, {1, 1, 1}, {2, 2, 4}, {8, 4, 2}};

// Wrong elements in each prefill rank's staging after a gather: host reference from the
// plan (offsets, slices) and the prefill side's ownership.
uint64_t host_check_src_staging(Handoff& h) {
    const TransferPlan& plan = h.plan();
    const HostRequest& q = h.placed().requests()[0];
    uint64_t bad = 0;
    for (int s = 0; s < plan.tp.prefill_tp; ++s) {
        const std::vector<uint16_t> got = download(h.src_staging(s), plan.src_staging_bytes[s] / 2);
        for (int i : plan.pairs_of_src[s]) {
            const TransferPair& p = plan.pairs[i];
            const int head0 = rank_heads(plan.tp.prefill_tp, s, plan.tp.kv_heads).first + p.slice.src_head_start;
            for (int kv = 0; kv < 2; ++kv)
                for (int l = 0; l < plan.layers; ++l)
                    for (int t = 0; t < plan.tokens; ++t)
                        for (int hh = 0; hh < p.slice.num_heads; ++hh) {
                            const int64_t at = (p.src_offset + plan.layout.offset(0, kv, l, t, hh)) / 2;
                            for (int d = 0; d < kHeadDim; ++d)
                                bad += got[at + d] != kv_value(q.id, l, kv, head0 + hh, q.prefix + t, d);
                        }
        }
    }
    return bad;
}

// Wrong elements in every decode rank's pools: the handed-off tokens in their pages, the
// cached prefix and every other slot still holding the background.
uint64_t host_check_decode_pools(Handoff& h, std::string* first) {
    const TransferPlan& plan = h.plan();
    const HostRequest& q = h.placed().requests()[0];
    const SidePools& pools = h.decode_pools();
    std::map<int, int> page_of;  // block -> logical page
    for (size_t p = 0; p < q.decode_pages.size(); ++p) page_of[q.decode_pages[p]] = static_cast<int>(p);
    uint64_t bad = 0;
    for (int r = 0; r < plan.tp.decode_tp; ++r) {
        const PoolPattern pat = pools.pattern(r, nullptr, nullptr);  // for its salt and first head
        for (int lkv = 0; lkv < 2 * plan.layers; ++lkv) {
            const std::vector<uint16_t> got =
                download(pools.layer(r, lkv), static_cast<size_t>(pools.num_blocks()) * pools.heads() * kPageSize * kHeadDim);
            size_t i = 0;
            for (int b = 0; b < pools.num_blocks(); ++b)
                for (int hh = 0; hh < pools.heads(); ++hh)
                    for (int slot = 0; slot < kPageSize; ++slot)
                        for (int d = 0; d < kHeadDim; ++d, ++i) {
                            uint16_t want = background(pat.salt, lkv, b, hh, slot, d);
                            const auto it = page_of.find(b);
                            if (it != page_of.end()) {
                                const int t = it->second * kPageSize + slot;
                                if (t >= q.prefix && t < q.total())
                                    want = kv_value(q.id, lkv % plan.layers, lkv / plan.layers, pat.global_head0 + hh, t, d);
                            }
                            if (got[i] != want && bad++ == 0 && first)
                                *first = "rank " + std::to_string(r) + " layer_kv " + std::to_string(lkv) + " block " +
                                         std::to_string(b) + " head " + std::to_string(hh) + " slot " + std::to_string(slot) +
                                         " d " + std::to_string(d);
                        }
        }
    }
    return bad;
}

void sync() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace

TEST_CASE("lesson07 gather, transfer and scatter are bit-exact for every TP pair (seed 20250707)", "[gpu][lesson07]") {
    gpu_for_test();
    for (const TpConfig& tp : kPairs)
        for (int tokens : {1, 37, 300}) {
            const StagingShape shape = make_staging_shape(tokens, 3, tp);
            const int prefix = tokens == 37 ? 2 * kPageSize : 0;
            INFO(shape.name << " prefix " << prefix);
            Handoff h(shape, prefix, kSeed, 0, 0);
            h.fill_prefill();
            h.poison_staging();
            h.reset_decode();
            h.gather(nullptr, 2 * shape.layers);
            sync();
            CHECK(host_check_src_staging(h) == 0);
            CHECK(h.check_prefill_staging() == 0);  // the device-side check agrees
            h.transfer(nullptr, 2 * shape.layers);
            h.scatter(nullptr, 2 * shape.layers);
            sync();
            std::string first;
            CHECK(host_check_decode_pools(h, &first) == 0);
            INFO(first);
            CHECK(h.check_decode_pools().mismatches == 0);
            // gather 1 launch per prefill rank, 1 copy per pair, 1 scatter per decode rank
            CHECK(h.gather_calls(2 * shape.layers) == tp.prefill_tp);
            CHECK(h.transfer_calls(2 * shape.layers) == static_cast<int64_t>(h.plan().pairs.size()));
            CHECK(h.scatter_calls(2 * shape.layers) == tp.decode_tp);
        }
}

TEST_CASE("lesson07 per_layer and per_token land the same bytes as staged", "[gpu][lesson07]") {
    gpu_for_test();
    for (const TpConfig& tp : {TpConfig{4, 2, 8}, TpConfig{2, 4, 8}, TpConfig{1, 4, 2}}) {
        const StagingShape shape = make_staging_shape(45, 2, tp);
        INFO(shape.name);
        Handoff h(shape, kPageSize, kSeed, 0, 0);
        h.fill_prefill();
        h.poison_staging();
        h.reset_decode();
        h.gather(nullptr, 1);
        h.transfer(nullptr, 1);
        h.scatter(nullptr, 1);
        sync();
        CHECK(host_check_src_staging(h) == 0);
        CHECK(host_check_decode_pools(h, nullptr) == 0);
        CHECK(h.gather_calls(1) == 4 * tp.prefill_tp);

        h.reset_decode();
        h.per_token(nullptr);
        sync();
        CHECK(host_check_decode_pools(h, nullptr) == 0);
        CHECK(h.per_token_calls() == static_cast<int64_t>(h.plan().pairs.size()) * 4 * 45);
    }
}

TEST_CASE("lesson07 scatter alone places a correct staging buffer and nothing else", "[gpu][lesson07]") {
    gpu_for_test();
    const StagingShape shape = make_staging_shape(1000, 2, {8, 2, 2});  // many tiles, a partial last one
    Handoff h(shape, 3 * kPageSize, kSeed, 0, 0);
    h.reset_decode();
    h.fill_decode_staging_expected();
    h.scatter(nullptr, 2 * shape.layers);
    sync();
    std::string first;
    CHECK(host_check_decode_pools(h, &first) == 0);
    INFO(first);
}

TEST_CASE("lesson07 a chunk sent to the wrong heads is caught by the pool check", "[gpu][lesson07]") {
    gpu_for_test();
    const StagingShape shape = make_staging_shape(40, 2, {1, 4, 2});
    Handoff h(shape, 0, kSeed, 0, 0);
    h.fill_prefill();
    h.reset_decode();
    // decode rank 1 should get source head 0 (rank / replication); send it head 1 instead,
    // what rank % heads would pick
    std::vector<Chunk> wrong = h.src_chunks(0);
    REQUIRE(wrong.size() == 4);
    wrong[1].pool_head_start = 1;
    launch_gather(h.prefill_pools().pool(0), h.placed().prefill_page_table(0), 0, 40, wrong, h.src_staging(0), 0, 4, nullptr);
    h.transfer(nullptr, 4);
    h.scatter(nullptr, 4);
    sync();
    const PoolCheck c = h.check_decode_pools();
    CHECK(c.mismatches > 0);
    CHECK(c.first.find("decode rank 1") != std::string::npos);
    CHECK(host_check_decode_pools(h, nullptr) == c.mismatches);
}

TEST_CASE("lesson07 launchers refuse what the kernels cannot take", "[gpu][lesson07]") {
    gpu_for_test();
    const StagingShape shape = make_staging_shape(20, 1, {2, 4, 8});
    Handoff h(shape, 0, kSeed, 0, 0);
    const PoolRef pool = h.prefill_pools().pool(0);
    const int* pages = h.placed().prefill_page_table(0);
    auto chunks = h.src_chunks(0);
    CHECK_THROWS_AS(launch_gather(pool, pages, 0, 20, {{3, 2, 0}}, h.src_staging(0), 0, 2, nullptr), pa::CudaError);  // heads 3,4 of 4
    CHECK_THROWS_AS(launch_gather(pool, pages, 0, 20, {{0, 2, 8}}, h.src_staging(0), 0, 2, nullptr), pa::CudaError);  // misaligned
    CHECK_THROWS_AS(launch_gather(pool, pages, 0, 20, std::vector<Chunk>(17, chunks[0]), h.src_staging(0), 0, 2, nullptr),
                    pa::CudaError);
    CHECK_THROWS_AS(launch_gather(pool, pages, 0, 20, {}, h.src_staging(0), 0, 2, nullptr), pa::CudaError);
    CHECK_THROWS_AS(launch_gather(pool, pages, 0, 20, chunks, h.src_staging(0), 1, 2, nullptr), pa::CudaError);  // layers 1..2 of 2
    CHECK_NOTHROW(launch_gather(pool, pages, 0, 0, chunks, h.src_staging(0), 0, 2, nullptr));  // nothing to move
    sync();
}

TEST_CASE("lesson07 server loop: every request bit-exact, the ring wrapping and the watermark gating", "[gpu][lesson07]") {
    gpu_for_test();
    for (const TpConfig& tp : {TpConfig{4, 2, 8}, TpConfig{2, 4, 8}, TpConfig{1, 4, 2}, TpConfig{8, 2, 2}}) {
        ServerLoopConfig cfg;
        cfg.tp = tp;
        cfg.requests = 160;
        cfg.seed = kSeed;
        const ServerLoopResult r = run_server_loop(cfg);
        INFO("tp " << tp.prefill_tp << "to" << tp.decode_tp << " kv" << tp.kv_heads << ": " << r.failure << " " << r.first);
        CHECK(r.pass());
        CHECK(r.rounds >= 20);
        CHECK(r.waits > 0);
        CHECK(r.requests == 160);
    }
}

TEST_CASE("lesson07 staged_peer and staged_nccl are bit-exact across two GPUs", "[gpu][lesson07]") {
    gpu_for_test();
    if (visible_devices() < 2) SKIP("needs two GPUs; " << visible_devices() << " visible");
    enable_peer_access(0, 1);
    std::unique_ptr<NcclPair> nccl;
    if (nccl_built()) nccl = std::make_unique<NcclPair>(0, 1);
    for (const TpConfig& tp : {TpConfig{4, 2, 8}, TpConfig{2, 4, 8}, TpConfig{1, 4, 2}}) {
        const StagingShape shape = make_staging_shape(300, 2, tp);
        INFO(shape.name);
        Handoff h(shape, kPageSize, kSeed, 0, 1);
        h.fill_prefill();
        for (int path = 0; path < (nccl ? 2 : 1); ++path) {
            INFO((path ? "nccl" : "peer"));
            h.poison_staging();
            h.reset_decode();
            {
                DeviceGuard g(0);
                h.gather(nullptr, 4);
                if (path == 0) h.transfer(nullptr, 4);
                else h.transfer_nccl(*nccl, nullptr, nullptr);
                sync();
            }
            {
                DeviceGuard g(1);
                sync();
                h.scatter(nullptr, 4);
                sync();
            }
            CHECK(h.check_decode_staging() == 0);
            std::string first;
            {
                DeviceGuard g(1);
                CHECK(host_check_decode_pools(h, &first) == 0);
            }
            INFO(first);
            CHECK(h.check_decode_pools().mismatches == 0);
        }
    }
}
