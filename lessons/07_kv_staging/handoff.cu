#include "handoff.h"

#include <algorithm>
#include <numeric>

#include "cuda_check.cuh"
#include "nccl_link.h"
#include "random.h"
#include "table.h"

namespace lesson07 {

namespace {

constexpr uint32_t kPrefillSalt = 1, kDecodeSalt = 2;

int pages_for(int tokens) { return (tokens + kPageSize - 1) / kPageSize; }

// A random permutation of [0, n), never the identity (for n >= 2).
std::vector<int> random_blocks(int n, pa::Rng& rng) {
    std::vector<int> p(n);
    std::iota(p.begin(), p.end(), 0);
    for (int i = n - 1; i > 0; --i) std::swap(p[i], p[static_cast<int>(rng.below(static_cast<uint64_t>(i) + 1))]);
    bool identity = true;
    for (int i = 0; i < n && identity; ++i) identity = p[i] == i;
    if (identity && n >= 2) std::rotate(p.begin(), p.begin() + 1, p.end());
    return p;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }

int visible_devices() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

bool enable_peer_access(int a, int b) {
    int ab = 0, ba = 0;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&ab, a, b));
    CUDA_CHECK(cudaDeviceCanAccessPeer(&ba, b, a));
    if (!ab || !ba) return false;
    for (auto [from, to] : {std::pair<int, int>{a, b}, std::pair<int, int>{b, a}}) {
        DeviceGuard g(from);
        const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else CUDA_CHECK(e);
    }
    return true;
}

// ---------------------------------------------------------------- SidePools

int64_t SidePools::rank_bytes(int kv_heads, int tp, int layers, int num_blocks) {
    return int64_t{2} * layers * num_blocks * heads_per_rank(tp, kv_heads) * kPageSize * kHeadDim * kElemBytes;
}

SidePools::SidePools(int device, int tp, int kv_heads, int layers, int num_blocks, uint32_t side_salt)
    : device_(device), tp_(tp), kv_heads_(kv_heads), heads_(heads_per_rank(tp, kv_heads)), layers_(layers),
      num_blocks_(num_blocks), salt_(side_salt) {
    DeviceGuard g(device);
    const size_t layer_elems = static_cast<size_t>(num_blocks) * heads_ * kPageSize * kHeadDim;
    for (int r = 0; r < tp; ++r) {
        storage_.emplace_back(layer_elems * 2 * layers);
        std::vector<void*> table(2 * layers);
        for (int l = 0; l < 2 * layers; ++l) table[l] = storage_.back().get() + l * layer_elems;
        layer_tables_.emplace_back(table);
    }
}

PoolRef SidePools::pool(int rank) const {
    PoolRef p;
    p.layers = layer_tables_.at(rank).get();
    p.layers_kv = 2 * layers_;
    p.heads = heads_;
    return p;
}

uint16_t* SidePools::layer(int rank, int layer_kv) const {
    const size_t layer_elems = static_cast<size_t>(num_blocks_) * heads_ * kPageSize * kHeadDim;
    return const_cast<uint16_t*>(storage_.at(rank).get()) + layer_kv * layer_elems;
}

PoolPattern SidePools::pattern(int rank, const BlockOwner* owner, const PatternRequest* requests) const {
    PoolPattern p;
    p.storage = const_cast<uint16_t*>(storage_.at(rank).get());
    p.layers = layers_;
    p.num_blocks = num_blocks_;
    p.heads = heads_;
    p.global_head0 = rank_heads(tp_, rank, kv_heads_).first;
    p.salt = salt_ * 256 + static_cast<uint32_t>(rank);
    p.owner = owner;
    p.requests = requests;
    return p;
}

// ---------------------------------------------------------------- PlacedRequests

int PlacedRequests::blocks_needed(const std::vector<std::pair<int, int>>& prefix_and_tokens) {
    int64_t pages = 0;
    for (const auto& [prefix, tokens] : prefix_and_tokens) pages += pages_for(prefix + tokens);
    // room no request owns, so that a copy to the wrong page lands where the check looks
    return static_cast<int>(pages + pages / 8 + 3);
}

PlacedRequests::PlacedRequests(const std::vector<std::pair<int, int>>& prefix_and_tokens, uint64_t seed, int prefill_device,
                               int decode_device) {
    num_blocks_ = blocks_needed(prefix_and_tokens);
    pa::Rng rng(seed, 0x707);
    const std::vector<int> prefill_perm = random_blocks(num_blocks_, rng), decode_perm = random_blocks(num_blocks_, rng);
    std::vector<int> prefill_flat, decode_flat;
    std::vector<BlockOwner> prefill_owner(num_blocks_, BlockOwner{-1, -1}), decode_owner(num_blocks_, BlockOwner{-1, -1});
    std::vector<PatternRequest> patterns;
    size_t next = 0;
    for (size_t r = 0; r < prefix_and_tokens.size(); ++r) {
        HostRequest q;
        q.id = static_cast<uint32_t>(r + 1);
        q.prefix = prefix_and_tokens[r].first;
        q.tokens = prefix_and_tokens[r].second;
        if (q.prefix % kPageSize != 0 || q.prefix < 0 || q.tokens < 0)
            throw PlanError(pa::strf("request %zu: prefix %d must be a whole number of pages and tokens %d >= 0", r, q.prefix, q.tokens));
        for (int p = 0; p < pages_for(q.total()); ++p, ++next) {
            q.prefill_pages.push_back(prefill_perm[next]);
            q.decode_pages.push_back(decode_perm[next]);
            prefill_owner[prefill_perm[next]] = {static_cast<int>(r), p};
            decode_owner[decode_perm[next]] = {static_cast<int>(r), p};
        }
        table_offset_.push_back(static_cast<int64_t>(prefill_flat.size()));
        prefill_flat.insert(prefill_flat.end(), q.prefill_pages.begin(), q.prefill_pages.end());
        decode_flat.insert(decode_flat.end(), q.decode_pages.begin(), q.decode_pages.end());
        patterns.push_back({q.id, q.prefix, q.total()});
        requests_.push_back(std::move(q));
    }
    prefill_flat.push_back(0);  // never empty: a zero-token request still has a valid pointer
    decode_flat.push_back(0);
    {
        DeviceGuard g(prefill_device);
        prefill_tables_.upload(prefill_flat);
        prefill_owner_.upload(prefill_owner);
        prefill_requests_.upload(patterns);
    }
    DeviceGuard g(decode_device);
    decode_tables_.upload(decode_flat);
    decode_owner_.upload(decode_owner);
    decode_requests_.upload(patterns);
}

// ---------------------------------------------------------------- Handoff

HandoffBytes handoff_bytes(const StagingShape& shape, int prefix) {
    const TransferPlan plan = make_transfer_plan(shape.tp, shape.layers, shape.tokens);
    const int blocks = PlacedRequests::blocks_needed({{prefix, shape.tokens}});
    HandoffBytes b;
    b.prefill = shape.tp.prefill_tp * SidePools::rank_bytes(shape.tp.kv_heads, shape.tp.prefill_tp, shape.layers, blocks);
    b.decode = shape.tp.decode_tp * SidePools::rank_bytes(shape.tp.kv_heads, shape.tp.decode_tp, shape.layers, blocks);
    for (int64_t s : plan.src_staging_bytes) b.prefill += s;
    for (int64_t s : plan.dst_allocation_bytes) b.decode += s;
    return b;
}

Handoff::Handoff(const StagingShape& shape, int prefix, uint64_t seed, int prefill_device, int decode_device)
    : shape_(shape),
      plan_(make_transfer_plan(shape.tp, shape.layers, shape.tokens)),
      placed_({{prefix, shape.tokens}}, seed, prefill_device, decode_device),
      prefill_(prefill_device, shape.tp.prefill_tp, shape.tp.kv_heads, shape.layers, placed_.num_blocks(), kPrefillSalt),
      decode_(decode_device, shape.tp.decode_tp, shape.tp.kv_heads, shape.layers, placed_.num_blocks(), kDecodeSalt) {
    {
        DeviceGuard g(prefill_device);
        for (int64_t bytes : plan_.src_staging_bytes) src_staging_.emplace_back(static_cast<size_t>(bytes));
    }
    DeviceGuard g(decode_device);
    for (int64_t bytes : plan_.dst_allocation_bytes) dst_staging_.emplace_back(static_cast<size_t>(bytes));
}

Handoff::~Handoff() = default;

std::vector<Chunk> Handoff::src_chunks(int s) const {
    std::vector<Chunk> out;
    for (int i : plan_.pairs_of_src[s]) {
        const TransferPair& p = plan_.pairs[i];
        out.push_back({p.slice.src_head_start, p.slice.num_heads, p.src_offset});
    }
    return out;
}

std::vector<Chunk> Handoff::dst_chunks(int d) const {
    std::vector<Chunk> out;
    for (int i : plan_.pairs_of_dst[d]) {
        const TransferPair& p = plan_.pairs[i];
        out.push_back({p.slice.dst_head_start, p.slice.num_heads, p.dst_offset});
    }
    return out;
}

// The model heads a chunk carries, computed from each side's own ownership: the prefill
// side's view here, the decode side's below; the CPU tests prove the two agree.
std::vector<StagingPattern> Handoff::src_patterns(int s) const {
    std::vector<StagingPattern> out;
    for (int i : plan_.pairs_of_src[s]) {
        const TransferPair& p = plan_.pairs[i];
        out.push_back({p.src_offset, rank_heads(shape_.tp.prefill_tp, s, shape_.tp.kv_heads).first + p.slice.src_head_start,
                       p.slice.num_heads});
    }
    return out;
}

std::vector<StagingPattern> Handoff::dst_patterns(int d) const {
    std::vector<StagingPattern> out;
    for (int i : plan_.pairs_of_dst[d]) {
        const TransferPair& p = plan_.pairs[i];
        out.push_back({p.dst_offset, rank_heads(shape_.tp.decode_tp, d, shape_.tp.kv_heads).first + p.slice.dst_head_start,
                       p.slice.num_heads});
    }
    return out;
}

void Handoff::fill_prefill() {
    DeviceGuard g(prefill_.device());
    for (int s = 0; s < prefill_.tp(); ++s)
        fill_pool(prefill_.pattern(s, placed_.prefill_owner(), placed_.prefill_requests()), PoolContent::prefill);
    CUDA_CHECK(cudaDeviceSynchronize());
}

void Handoff::reset_decode() {
    DeviceGuard g(decode_.device());
    for (int d = 0; d < decode_.tp(); ++d)
        fill_pool(decode_.pattern(d, placed_.decode_owner(), placed_.decode_requests()), PoolContent::background);
    CUDA_CHECK(cudaDeviceSynchronize());
}

void Handoff::poison_staging() {
    {
        DeviceGuard g(prefill_.device());
        for (auto& b : src_staging_) b.fill_bytes(0xff);
        CUDA_CHECK(cudaDeviceSynchronize());  // the stages run on other streams
    }
    DeviceGuard g(decode_.device());
    for (auto& b : dst_staging_) b.fill_bytes(0xff);
    CUDA_CHECK(cudaDeviceSynchronize());
}

void Handoff::fill_decode_staging_expected() {
    const HostRequest& q = placed_.requests()[0];
    DeviceGuard g(decode_.device());
    for (int d = 0; d < decode_.tp(); ++d)
        fill_staging(dst_staging_[d].get(), dst_patterns(d), shape_.layers, q.tokens, q.id, q.prefix);
    CUDA_CHECK(cudaDeviceSynchronize());
}

uint64_t Handoff::check_prefill_staging() {
    const HostRequest& q = placed_.requests()[0];
    DeviceGuard g(prefill_.device());
    uint64_t bad = 0;
    for (int s = 0; s < prefill_.tp(); ++s)
        bad += count_staging_mismatches(src_staging_[s].get(), src_patterns(s), shape_.layers, q.tokens, q.id, q.prefix).count;
    return bad;
}

uint64_t Handoff::check_decode_staging() {
    const HostRequest& q = placed_.requests()[0];
    DeviceGuard g(decode_.device());
    uint64_t bad = 0;
    for (int d = 0; d < decode_.tp(); ++d)
        bad += count_staging_mismatches(dst_staging_[d].get(), dst_patterns(d), shape_.layers, q.tokens, q.id, q.prefix).count;
    return bad;
}

PoolCheck Handoff::check_decode_pools() {
    DeviceGuard g(decode_.device());
    PoolCheck c;
    for (int d = 0; d < decode_.tp(); ++d) {
        const PoolPattern p = decode_.pattern(d, placed_.decode_owner(), placed_.decode_requests());
        const Mismatches m = count_pool_mismatches(p, PoolContent::decode_after);
        if (m.count && c.first.empty()) c.first = pa::strf("decode rank %d: ", d) + describe_pool_element(p, m.first);
        c.mismatches += m.count;
    }
    return c;
}

void Handoff::gather(cudaStream_t stream, int layers_per_launch) {
    const HostRequest& q = placed_.requests()[0];
    DeviceGuard g(prefill_.device());
    for (int s = 0; s < prefill_.tp(); ++s)
        for (int l = 0; l < 2 * shape_.layers; l += layers_per_launch)
            launch_gather(prefill_.pool(s), placed_.prefill_page_table(0), q.prefix, q.tokens, src_chunks(s),
                          src_staging_[s].get(), l, std::min(layers_per_launch, 2 * shape_.layers - l), stream);
}

void Handoff::scatter(cudaStream_t stream, int layers_per_launch) {
    const HostRequest& q = placed_.requests()[0];
    DeviceGuard g(decode_.device());
    for (int d = 0; d < decode_.tp(); ++d)
        for (int l = 0; l < 2 * shape_.layers; l += layers_per_launch)
            launch_scatter(decode_.pool(d), placed_.decode_page_table(0), q.prefix, q.tokens, dst_chunks(d),
                           dst_staging_[d].get(), l, std::min(layers_per_launch, 2 * shape_.layers - l), stream);
}

void Handoff::transfer(cudaStream_t stream, int layers_per_launch) {
    DeviceGuard g(prefill_.device());
    const int64_t layer_bytes = plan_.layout.layer_bytes();
    for (const TransferPair& p : plan_.pairs)
        for (int l = 0; l < 2 * shape_.layers; l += layers_per_launch) {
            const int64_t at = l * layer_bytes;
            const int64_t bytes = std::min<int64_t>(layers_per_launch, 2 * shape_.layers - l) * layer_bytes;
            if (bytes == 0) continue;
            const uint8_t* src = src_staging_[p.src_rank].get() + p.src_offset + at;
            uint8_t* dst = dst_staging_[p.dst_rank].get() + p.dst_offset + at;
            if (two_devices())
                CUDA_CHECK(cudaMemcpyPeerAsync(dst, decode_.device(), src, prefill_.device(), static_cast<size_t>(bytes), stream));
            else
                CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream));
        }
}

void Handoff::transfer_nccl(NcclPair& nccl, cudaStream_t prefill_stream, cudaStream_t decode_stream) {
    std::vector<NcclChunk> chunks;
    for (const TransferPair& p : plan_.pairs)
        chunks.push_back({src_staging_[p.src_rank].get() + p.src_offset, dst_staging_[p.dst_rank].get() + p.dst_offset,
                          static_cast<size_t>(p.bytes)});
    if (plan_.tokens > 0) nccl.send_recv(chunks, prefill_stream, decode_stream);
}

void Handoff::per_token(cudaStream_t stream) {
    if (two_devices()) throw pa::CudaError("per_token runs on one device");
    const HostRequest& q = placed_.requests()[0];
    DeviceGuard g(prefill_.device());
    const size_t row = static_cast<size_t>(kHeadDim) * kElemBytes;
    const size_t head_pitch = row * kPageSize;  // the next head of the same token, in a head-major page
    for (const TransferPair& p : plan_.pairs)
        for (int l = 0; l < 2 * shape_.layers; ++l) {
            const uint16_t* src_layer = prefill_.layer(p.src_rank, l);
            uint16_t* dst_layer = decode_.layer(p.dst_rank, l);
            for (int t = q.prefix; t < q.total(); ++t) {
                const size_t src_row = (static_cast<size_t>(q.prefill_pages[t / kPageSize]) * prefill_.heads() + p.slice.src_head_start) * kPageSize + t % kPageSize;
                const size_t dst_row = (static_cast<size_t>(q.decode_pages[t / kPageSize]) * decode_.heads() + p.slice.dst_head_start) * kPageSize + t % kPageSize;
                // the token's num_heads rows of one layer: one call, as one RDMA write per token would be
                CUDA_CHECK(cudaMemcpy2DAsync(dst_layer + dst_row * kHeadDim, head_pitch, src_layer + src_row * kHeadDim, head_pitch,
                                             row, static_cast<size_t>(p.slice.num_heads), cudaMemcpyDeviceToDevice, stream));
            }
        }
}

int64_t Handoff::gather_calls(int layers_per_launch) const {
    return int64_t{prefill_.tp()} * ((2 * shape_.layers + layers_per_launch - 1) / layers_per_launch);
}
int64_t Handoff::transfer_calls(int layers_per_launch) const {
    return static_cast<int64_t>(plan_.pairs.size()) * ((2 * shape_.layers + layers_per_launch - 1) / layers_per_launch);
}
int64_t Handoff::scatter_calls(int layers_per_launch) const {
    return int64_t{decode_.tp()} * ((2 * shape_.layers + layers_per_launch - 1) / layers_per_launch);
}
int64_t Handoff::per_token_calls() const {
    return static_cast<int64_t>(plan_.pairs.size()) * 2 * shape_.layers * shape_.tokens;
}

}  // namespace lesson07
