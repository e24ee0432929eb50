// Lesson 05's host interface: its steps as decode variants. Compiled once in
// lesson05.cu; main.cu and the tests use this header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "decode_driver.cuh"
#include "gated_reference.h"

namespace lesson05 {

// The gate a variant's launches use, read at each launch: the check executable changes it
// between its passes (sigma 0 / 1.5 / 2.9), a test makes one per case.
using Gate = std::shared_ptr<pa::reference::GateParams>;
Gate make_gate(double sigma, double gamma = 1.0);  // validated (pa::reference::validate_gate)

// The steps, in ladder order: gate, k_ahead, smem_pages, l2_hints (these four on the 2-slot
// ring), scores_in_slot, bulk_rows (one sequence per CTA), dense, zero_skip, compact_atomic,
// compact_ordered, split_k_compact (partitions from split_partition_size), split_k_cluster (sm_90 only: the
// same partitions, at most 16, or 8 where 16 CTAs do not fit a GPC, merged in a
// thread-block cluster), branchless_gate (step 10 with the gate of step 13).
std::vector<pa::DecodeVariant> variants(const Gate& gate);
// One of them by name; throws std::invalid_argument for another name.
pa::DecodeVariant variant(const std::string& name, const Gate& gate);
// split_k_compact with a fixed partition size (a positive multiple of 128 tokens), for the
// tests: named split_k_compact_<P>. `small_ring`: on the 2-slot ring, as small_ring_variants.
pa::DecodeVariant split_k_variant(int partition_size, const Gate& gate, bool small_ring = false);
// Steps 7-11 and 13 on the layout that GPUs with 99 KiB of shared memory a CTA (sm_86, sm_89) run
// (gated_layout.cuh: one CTA per SM, a 2-slot ring, K one tile ahead), whatever this GPU has:
// the tests check it on a larger one. Named <step>_ring2. Without them, a launch takes that
// layout only where the two others do not fit.
std::vector<pa::DecodeVariant> small_ring_variants(const Gate& gate);
// split_k_cluster likewise (split_k_cluster_<P>); refused where that makes more partitions
// than a cluster holds (16, or 8 where 16 CTAs do not fit a GPC).
pa::DecodeVariant split_k_cluster_variant(int partition_size, const Gate& gate);

// The partitions a step splits a shape into on a GPU with `sms` SMs (1 for the single-pass
// steps).
int partitions_for(const std::string& variant_name, const pa::DecodeShape& s, int sms);

// Sequences per CTA of the single-pass steps on a GPU with `sms` SMs and the current GPU's
// shared memory (1 or 2; sparsity.h: seqs_per_cta, with this build's page array; always 1
// where only the 2-slot ring fits).
int seqs_per_cta_for(const pa::DecodeShape& s, int sms);

// Why no step can run a shape here ("" when they can): D other than 128, a group above 8,
// or too little shared memory per CTA for the smallest layout (the 2-slot ring).
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info);

}  // namespace lesson05
