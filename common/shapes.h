// The shape catalogue: every decode shape the lessons measure, by name.
//
// Names are `<model>-B<batch>-ctx<context>` with `k` for multiples of 1024
// (`llama7b-B32-ctx1k`, `h8kv4-B64-ctx128`). Tables A, B and C are the ones the
// blog posts measured; see CURRICULUM.md in the lessons' text for where each is used.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtype.h"

namespace pa {

struct DecodeShape {
    std::string name;   // catalogue name, or a generated one for explicit flags
    int B = 1;          // sequences in the batch
    int H = 32;         // query heads
    int Hkv = 32;       // KV heads (H % Hkv == 0)
    int D = 128;        // head size
    int block_size = 16;  // tokens per page
    DType dtype = DType::fp16;
    std::vector<int> ctx;  // context length of each sequence, size B

    int group() const { return H / Hkv; }
    int max_ctx() const;
    long long total_tokens() const;
    // Bytes of K and V a decode must read: every real token's K and V row.
    long long kv_bytes() const;
};

// "1k" for 1024, "4k" for 4096, "512" for 512.
std::string ctx_label(int ctx);
std::string decode_shape_name(const std::string& model, int B, int ctx);

// Any decode shape: a name and one context length per sequence (B = ctx.size()).
DecodeShape make_shape(std::string name, int H, int Hkv, std::vector<int> ctx, int D = 128, int block_size = 16,
                       DType dtype = DType::fp16);

struct PagedDecodeArgs;
// The shape a launch's arguments describe (name "launch"), with the batch's real lengths
// when the caller passed them on the host (a.context_lens_host), else every sequence at
// a.max_ctx: what a launcher's host-side rule plans from.
DecodeShape launch_shape(const PagedDecodeArgs& a);

// One named catalogue shape with the same context for every sequence.
DecodeShape make_decode_shape(const std::string& model, int B, int H, int Hkv, int ctx, DType dtype,
                              int D = 128, int block_size = 16);

// Table A: softmax decode, fp16, block 16 (llama7b, llama70b, mqa).
std::vector<DecodeShape> table_a();
// Table B: split-count sweep, B1 (qwen1.5b H12/Hkv2, qwen7b H28/Hkv4), fp16.
std::vector<DecodeShape> table_b();
// Table C: the H200 post's grid, bf16, H8/Hkv4 (`h8kv4-B<b>-ctx<t>`).
std::vector<DecodeShape> table_c();
// Table C, split by the lesson-02 tables that use it.
std::vector<DecodeShape> table_c_tgs_sweep();
std::vector<DecodeShape> table_c_ablation();
// Table C as lesson 05 measures it: B in {1, 32, 64, 128} x ctx in {256, 512, 1024, 2048},
// bf16, H8/Hkv4. Not in shape_catalogue() (lesson 01 measures every catalogue shape);
// find_shape knows them.
std::vector<DecodeShape> table_c_grid();
// Everything above, each name once.
std::vector<DecodeShape> shape_catalogue();
// Beyond the posts, for split-k (lesson 03 on): a server-like batch of mixed lengths
// (llama70b-B16-mixed: 16 sequences, log-uniform in 256..32768 tokens, fixed seed) and
// 128k-token contexts (llama70b-B1-ctx128k, mqa-B1-ctx128k). Not in shape_catalogue(): a
// single-pass lesson cannot hold their logits. find_shape knows them.
std::vector<DecodeShape> long_context_shapes();

// The shapes of the default correctness check: awkward on purpose (ctx 1, ctx not a
// multiple of the page size, mixed lengths in one batch, page sizes 8/16/32, D 64/128/256,
// groups 1 to 32, both dtypes). Small, so the sanitizer can run them.
std::vector<DecodeShape> decode_check_shapes();

std::optional<DecodeShape> find_shape(const std::string& name);

}  // namespace pa
