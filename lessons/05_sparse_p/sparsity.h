// Lesson 05's host side, in plain C++ (no CUDA): what the gate leaves of a problem (the
// zeros of p per query head and per KV row), the byte model built on it, and how split-k
// cuts a context.
#pragma once

#include <cstdint>
#include <vector>

#include "gated_reference.h"
#include "paged_cache.h"
#include "shapes.h"

namespace lesson05 {

// The zeros of the gate's weights on one problem, counted from the CPU reference's p.
struct Sparsity {
    long long weights = 0;             // (sequence, query head, token) triples
    long long zero_weights = 0;        // ... whose p is exactly 0
    long long kv_rows = 0;             // (sequence, KV head, token) triples: V rows of the context
    long long skippable_rows = 0;      // ... where every query head of the group has p = 0
    std::vector<double> head_zero_share;  // [H]: share of zeros of query head h over the batch
    int max_ctx = 0;
    std::vector<uint8_t> row_used;     // [B][Hkv][max_ctx]: 1 where some query head of the group uses
                                       // V row t (t < the sequence's length), else 0

    double zero_share() const { return weights ? static_cast<double>(zero_weights) / weights : 0; }
    double row_zero_share() const { return kv_rows ? static_cast<double>(skippable_rows) / kv_rows : 0; }
};

Sparsity measure_sparsity(const pa::DecodeProblem& p, const pa::reference::GateParams& g);

// The byte model. A dense gated decode reads what a softmax decode reads
// (pa::decode_bytes_needed: K and V of every token, q, out, block table, lengths); one that
// skips the V rows no query head of the CTA uses needs all of that less those rows:
//   bytes_needed = all of K + the V rows some head uses + q + out + table + lengths
// and no kernel that must read them can beat dense bytes / bytes_needed over the dense one.
// `dense_bytes` is pa::decode_bytes_needed(shape) (common/, which this host code does not link).
long long sparse_bytes_needed(long long dense_bytes, const pa::DecodeShape& s, const Sparsity& z);
double limit_speedup(long long dense_bytes, long long needed_bytes);

// Split-k's partition size for a batch (split_k_compact): enough partitions that the grid
// gives every SM about two CTAs (B * Hkv * partitions ~ 2 * SMs, rounded to the nearest
// whole count), each a multiple of 128 tokens (a tile); partitions of at least 4 tiles
// unless B * Hkv is at most a quarter of the SMs; at most the longest context rounded up to
// a tile (one partition: the single pass). A batch whose grid already fills the GPU gets
// one partition.
int split_partition_size(int B, int Hkv, int max_ctx, int sms);

// Sequences per CTA of the single-pass steps (CtaSeqs in gated_layout.cuh): 2 when one CTA
// per (sequence, KV head) would be more than one wave of two CTAs per SM (B * Hkv > 2 *
// SMs), the halved grid still fills 90 % of such a wave, and each sequence's page ids fit
// half of the two-per-SM page array (`page_slots` ids; pages of `block_size` tokens); else 1.
int seqs_per_cta(int B, int Hkv, int max_ctx, int block_size, int sms, int page_slots);

}  // namespace lesson05
