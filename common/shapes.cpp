#include "shapes.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <utility>

#include "decode_args.h"
#include "random.h"

namespace pa {

int DecodeShape::max_ctx() const { return ctx.empty() ? 0 : *std::max_element(ctx.begin(), ctx.end()); }

long long DecodeShape::total_tokens() const {
    return std::accumulate(ctx.begin(), ctx.end(), 0LL);
}

long long DecodeShape::kv_bytes() const {
    return 2LL * total_tokens() * Hkv * D * 2;  // K and V, 2 bytes an element
}

std::string ctx_label(int ctx) {
    if (ctx >= 1024 && ctx % 1024 == 0) return std::to_string(ctx / 1024) + "k";
    return std::to_string(ctx);
}

std::string decode_shape_name(const std::string& model, int B, int ctx) {
    return model + "-B" + std::to_string(B) + "-ctx" + ctx_label(ctx);
}

DecodeShape make_shape(std::string name, int H, int Hkv, std::vector<int> ctx, int D, int block_size, DType dtype) {
    DecodeShape s;
    s.name = std::move(name);
    s.B = static_cast<int>(ctx.size());
    s.H = H;
    s.Hkv = Hkv;
    s.D = D;
    s.block_size = block_size;
    s.dtype = dtype;
    s.ctx = std::move(ctx);
    return s;
}

DecodeShape launch_shape(const PagedDecodeArgs& a) {
    const std::vector<int> lens = a.context_lens_host ? std::vector<int>(a.context_lens_host, a.context_lens_host + a.B)
                                                      : std::vector<int>(a.B, a.max_ctx);
    return make_shape("launch", a.H, a.Hkv, lens, a.D, a.block_size, a.dtype);
}

DecodeShape make_decode_shape(const std::string& model, int B, int H, int Hkv, int ctx, DType dtype,
                              int D, int block_size) {
    return make_shape(decode_shape_name(model, B, ctx), H, Hkv, std::vector<int>(B, ctx), D, block_size, dtype);
}

std::vector<DecodeShape> table_a() {
    const DType t = DType::fp16;
    return {
        make_decode_shape("llama7b", 1, 32, 32, 1024, t),
        make_decode_shape("llama7b", 1, 32, 32, 4096, t),
        make_decode_shape("llama7b", 8, 32, 32, 2048, t),
        make_decode_shape("llama7b", 32, 32, 32, 1024, t),
        make_decode_shape("llama70b", 1, 64, 8, 4096, t),
        make_decode_shape("llama70b", 4, 64, 8, 2048, t),
        make_decode_shape("llama70b", 16, 64, 8, 8192, t),
        make_decode_shape("mqa", 1, 32, 1, 4096, t),
        make_decode_shape("mqa", 16, 32, 1, 4096, t),
        make_decode_shape("mqa", 64, 32, 1, 2048, t),
    };
}

std::vector<DecodeShape> table_b() {
    const DType t = DType::fp16;
    std::vector<DecodeShape> out;
    for (int ctx : {128, 512, 1024, 2048, 4096}) out.push_back(make_decode_shape("qwen1.5b", 1, 12, 2, ctx, t));
    for (int ctx : {1024, 2048, 4096}) out.push_back(make_decode_shape("qwen7b", 1, 28, 4, ctx, t));
    return out;
}

static std::vector<DecodeShape> h8kv4(std::initializer_list<std::pair<int, int>> bt) {
    std::vector<DecodeShape> out;
    for (auto [b, t] : bt) out.push_back(make_decode_shape("h8kv4", b, 8, 4, t, DType::bf16));
    return out;
}

std::vector<DecodeShape> table_c_tgs_sweep() {
    return h8kv4({{1, 256}, {32, 256}, {32, 512}, {64, 128}, {64, 1024}, {128, 256}, {128, 512}});
}

std::vector<DecodeShape> table_c_ablation() {
    return h8kv4({{1, 256}, {32, 128}, {32, 256}, {32, 512}, {64, 128}, {64, 256}, {128, 256}});
}

// Union of both lists (and B32-ctx1k, the post's split-k inner-loop shape), in (B, T) order.
std::vector<DecodeShape> table_c() {
    return h8kv4({{1, 256}, {32, 128}, {32, 256}, {32, 512}, {32, 1024}, {64, 128}, {64, 256}, {64, 1024},
                  {128, 256}, {128, 512}});
}

std::vector<DecodeShape> table_c_grid() {
    std::vector<DecodeShape> out;
    for (int b : {1, 32, 64, 128})
        for (int t : {256, 512, 1024, 2048}) out.push_back(make_decode_shape("h8kv4", b, 8, 4, t, DType::bf16));
    return out;
}

std::vector<DecodeShape> shape_catalogue() {
    std::vector<DecodeShape> out;
    std::set<std::string> seen;
    for (const auto& list : {table_a(), table_b(), table_c()})
        for (const auto& s : list)
            if (seen.insert(s.name).second) out.push_back(s);
    return out;
}

std::vector<DecodeShape> long_context_shapes() {
    // 16 lengths, log-uniform in [256, 32768], from a fixed seed: what a server's batch looks like.
    std::vector<int> mixed;
    Rng rng(20261123);
    for (int b = 0; b < 16; ++b) mixed.push_back(static_cast<int>(std::lround(256.0 * std::pow(128.0, rng.uniform()))));
    return {
        make_shape("llama70b-B16-mixed", 64, 8, mixed, 128, 16, DType::fp16),
        make_decode_shape("llama70b", 1, 64, 8, 131072, DType::fp16),
        make_decode_shape("mqa", 1, 32, 1, 131072, DType::fp16),
    };
}

static DecodeShape check_shape(int B, int H, int Hkv, std::vector<int> ctx, int D, int block_size, DType t) {
    const std::string name = "check-B" + std::to_string(B) + "-H" + std::to_string(H) + "-Hkv" + std::to_string(Hkv) +
                             "-D" + std::to_string(D) + "-bs" + std::to_string(block_size) + "-" + dtype_name(t);
    return make_shape(name, H, Hkv, std::move(ctx), D, block_size, t);
}

std::vector<DecodeShape> decode_check_shapes() {
    const DType f = DType::fp16, b = DType::bf16;
    return {
        check_shape(1, 1, 1, {1}, 128, 16, f),                     // one token
        check_shape(3, 8, 2, {1, 17, 100}, 64, 8, b),              // mixed, not multiples of the page
        check_shape(4, 32, 1, {31, 32, 33, 250}, 128, 16, f),      // MQA, around a page boundary
        check_shape(2, 4, 4, {513, 1000}, 256, 32, b),             // D 256, MHA
        check_shape(5, 16, 4, {16, 7, 300, 64, 129}, 128, 32, f),  // GQA 4
        check_shape(2, 64, 8, {2048, 1531}, 128, 16, b),           // llama70b heads, long and odd
        check_shape(6, 8, 1, {5, 77, 128, 129, 255, 3000}, 64, 16, f),  // group 8
    };
}

std::optional<DecodeShape> find_shape(const std::string& name) {
    for (const auto& list : {shape_catalogue(), long_context_shapes(), table_c_grid()})
        for (const auto& s : list)
            if (s.name == name) return s;
    return std::nullopt;
}

}  // namespace pa
