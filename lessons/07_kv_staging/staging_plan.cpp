#include "staging_plan.h"

#include <algorithm>
#include <cctype>

namespace lesson07 {

namespace {

constexpr int kMaxTp = 64;
constexpr int kMaxKvHeads = 1024;
constexpr int kMaxTokens = 1 << 20;
constexpr int kMaxLayers = 256;

std::string side_name(bool prefill) { return prefill ? "prefill" : "decode"; }

void validate_side(int tp, int kv_heads, bool prefill) {
    const std::string side = side_name(prefill);
    if (tp < 1) throw PlanError(side + " TP must be at least 1, got " + std::to_string(tp));
    if (tp > kMaxTp) throw PlanError(side + " TP " + std::to_string(tp) + " is above the " + std::to_string(kMaxTp) + " this lesson plans for");
    if (tp <= kv_heads && kv_heads % tp != 0)
        throw PlanError(side + " TP " + std::to_string(tp) + " does not divide the " + std::to_string(kv_heads) +
                        " KV heads");
    if (tp > kv_heads && tp % kv_heads != 0)
        throw PlanError(side + " TP " + std::to_string(tp) + " is not a multiple of the " + std::to_string(kv_heads) +
                        " KV heads (each head must sit on the same number of ranks)");
}

// Reads 1-9 decimal digits at `pos` (no sign, no spaces).
bool read_number(const std::string& s, size_t& pos, int& out) {
    size_t end = pos;
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])) && end - pos < 10) ++end;
    if (end == pos || end - pos > 9) return false;
    out = std::stoi(s.substr(pos, end - pos));
    pos = end;
    return true;
}

bool read_literal(const std::string& s, size_t& pos, const char* lit) {
    const std::string l(lit);
    if (s.compare(pos, l.size(), l) != 0) return false;
    pos += l.size();
    return true;
}

}  // namespace

void validate(const TpConfig& tp) {
    if (tp.kv_heads < 1) throw PlanError("KV heads must be at least 1, got " + std::to_string(tp.kv_heads));
    if (tp.kv_heads > kMaxKvHeads) throw PlanError("KV heads " + std::to_string(tp.kv_heads) + " is above " + std::to_string(kMaxKvHeads));
    validate_side(tp.prefill_tp, tp.kv_heads, true);
    validate_side(tp.decode_tp, tp.kv_heads, false);
    const int hi = std::max(tp.prefill_tp, tp.decode_tp), lo = std::min(tp.prefill_tp, tp.decode_tp);
    if (hi % lo != 0)
        throw PlanError("TP pair " + std::to_string(tp.prefill_tp) + " -> " + std::to_string(tp.decode_tp) +
                        ": one TP size must divide the other");
}

int heads_per_rank(int tp, int kv_heads) { return std::max(1, kv_heads / tp); }
int replication(int tp, int kv_heads) { return std::max(1, tp / kv_heads); }

RankHeads rank_heads(int tp, int rank, int kv_heads) {
    if (rank < 0 || rank >= tp) throw PlanError("rank " + std::to_string(rank) + " is outside TP " + std::to_string(tp));
    const int hpr = heads_per_rank(tp, kv_heads);
    return {(rank / replication(tp, kv_heads)) * hpr, hpr};
}

int writers_per_reader(const TpConfig& tp) {
    return tp.prefill_tp > tp.decode_tp ? tp.prefill_tp / tp.decode_tp : 1;
}

int readers_per_writer(const TpConfig& tp) {
    return tp.decode_tp > tp.prefill_tp ? tp.decode_tp / tp.prefill_tp : 1;
}

int writer_rank(const TpConfig& tp, int dst_rank, int writer) {
    if (dst_rank < 0 || dst_rank >= tp.decode_tp)
        throw PlanError("decode rank " + std::to_string(dst_rank) + " is outside TP " + std::to_string(tp.decode_tp));
    const int writers = writers_per_reader(tp);
    if (writer < 0 || writer >= writers)
        throw PlanError("writer " + std::to_string(writer) + " of decode rank " + std::to_string(dst_rank) + " is outside its " +
                        std::to_string(writers) + " writers");
    if (tp.prefill_tp > tp.decode_tp) return dst_rank * writers + writer;
    return dst_rank / readers_per_writer(tp);
}

HeadSlice head_slice(const TpConfig& tp, int src_rank, int dst_rank) {
    validate(tp);
    if (src_rank < 0 || src_rank >= tp.prefill_tp)
        throw PlanError("prefill rank " + std::to_string(src_rank) + " is outside TP " + std::to_string(tp.prefill_tp));
    if (dst_rank < 0 || dst_rank >= tp.decode_tp)
        throw PlanError("decode rank " + std::to_string(dst_rank) + " is outside TP " + std::to_string(tp.decode_tp));
    const int src_hpr = heads_per_rank(tp.prefill_tp, tp.kv_heads), src_rep = replication(tp.prefill_tp, tp.kv_heads);
    const int dst_hpr = heads_per_rank(tp.decode_tp, tp.kv_heads), dst_rep = replication(tp.decode_tp, tp.kv_heads);
    HeadSlice s;
    if (tp.prefill_tp > tp.decode_tp) {
        if (src_rank / writers_per_reader(tp) != dst_rank)
            throw PlanError("prefill rank " + std::to_string(src_rank) + " does not write to decode rank " + std::to_string(dst_rank));
        s.src_head_start = 0;
        s.num_heads = src_hpr;
        s.dst_head_start = (src_rank / src_rep) * src_hpr % dst_hpr;
    } else {
        if (dst_rank / readers_per_writer(tp) != src_rank)
            throw PlanError("prefill rank " + std::to_string(src_rank) + " does not write to decode rank " + std::to_string(dst_rank));
        s.src_head_start = (dst_rank / dst_rep) * dst_hpr % src_hpr;
        s.num_heads = dst_hpr;
        s.dst_head_start = 0;
    }
    return s;
}

int64_t StagingLayout::offset(int writer, int kv, int layer, int token, int head) const {
    if (writer < 0 || writer >= writers || kv < 0 || kv > 1 || layer < 0 || layer >= layers || token < 0 ||
        token >= tokens || head < 0 || head >= heads)
        throw PlanError("staging index out of range");
    const int64_t layer_kv = int64_t{kv} * layers + layer;  // all K layers, then all V layers
    return writer * writer_bytes() + layer_kv * layer_bytes() + (int64_t{token} * heads + head) * row_bytes();
}

int64_t TransferPlan::total_bytes() const {
    int64_t t = 0;
    for (const auto& p : pairs) t += p.bytes;
    return t;
}

TransferPlan make_transfer_plan(const TpConfig& tp, int layers, int tokens) {
    validate(tp);
    if (layers < 1 || layers > kMaxLayers)
        throw PlanError("layers must be in [1, " + std::to_string(kMaxLayers) + "], got " + std::to_string(layers));
    if (tokens < 0 || tokens > kMaxTokens)
        throw PlanError("tokens must be in [0, " + std::to_string(kMaxTokens) + "], got " + std::to_string(tokens));
    TransferPlan plan;
    plan.tp = tp;
    plan.layers = layers;
    plan.tokens = tokens;
    const int writers = writers_per_reader(tp);
    plan.layout.writers = writers;
    plan.layout.layers = layers;
    plan.layout.tokens = tokens;
    plan.layout.heads = head_slice(tp, writer_rank(tp, 0, 0), 0).num_heads;  // the same for every pair
    plan.pairs_of_src.assign(tp.prefill_tp, {});
    plan.pairs_of_dst.assign(tp.decode_tp, {});
    plan.src_staging_bytes.assign(tp.prefill_tp, 0);
    plan.dst_allocation_bytes.assign(tp.decode_tp, plan.layout.total_bytes());
    for (int d = 0; d < tp.decode_tp; ++d) {
        for (int w = 0; w < writers; ++w) {
            TransferPair p;
            p.src_rank = writer_rank(tp, d, w);
            p.dst_rank = d;
            p.writer = w;
            p.slice = head_slice(tp, p.src_rank, d);
            p.bytes = plan.layout.writer_bytes();
            p.dst_offset = w * plan.layout.writer_bytes();  // writer-major
            p.src_offset = plan.src_staging_bytes[p.src_rank];
            plan.src_staging_bytes[p.src_rank] += p.bytes;
            const int index = static_cast<int>(plan.pairs.size());
            plan.pairs_of_src[p.src_rank].push_back(index);
            plan.pairs_of_dst[d].push_back(index);
            plan.pairs.push_back(p);
        }
    }
    return plan;
}

std::string staging_shape_name(int tokens, int layers, const TpConfig& tp) {
    std::string n = "T" + std::to_string(tokens) + "-L" + std::to_string(layers) + "-tp" + std::to_string(tp.prefill_tp) +
                    "to" + std::to_string(tp.decode_tp);
    if (tp.kv_heads != kDefaultKvHeads) n += "-kv" + std::to_string(tp.kv_heads);
    return n;
}

StagingShape make_staging_shape(int tokens, int layers, const TpConfig& tp) {
    if (tokens < 1 || tokens > kMaxTokens)
        throw PlanError("tokens must be in [1, " + std::to_string(kMaxTokens) + "], got " + std::to_string(tokens));
    make_transfer_plan(tp, layers, tokens);  // validates the rest
    return {staging_shape_name(tokens, layers, tp), tokens, layers, tp};
}

TpConfig parse_tp_pair(const std::string& text, int kv_heads) {
    size_t pos = 0;
    TpConfig tp;
    tp.kv_heads = kv_heads;
    if (!read_number(text, pos, tp.prefill_tp) || !read_literal(text, pos, "to") || !read_number(text, pos, tp.decode_tp) ||
        pos != text.size())
        throw PlanError("a TP pair is written like 4to2 (prefill TP, 'to', decode TP), got '" + text + "'");
    validate(tp);
    return tp;
}

StagingShape parse_staging_shape(const std::string& name) {
    const std::string form = "shape names look like T4096-L32-tp4to2 or T4096-L32-tp1to4-kv2";
    size_t pos = 0;
    int tokens = 0, layers = 0;
    TpConfig tp;
    if (!read_literal(name, pos, "T") || !read_number(name, pos, tokens) || !read_literal(name, pos, "-L") ||
        !read_number(name, pos, layers) || !read_literal(name, pos, "-tp") || !read_number(name, pos, tp.prefill_tp) ||
        !read_literal(name, pos, "to") || !read_number(name, pos, tp.decode_tp))
        throw PlanError("unknown shape '" + name + "' (" + form + ")");
    if (pos < name.size()) {
        if (!read_literal(name, pos, "-kv") || !read_number(name, pos, tp.kv_heads) || pos != name.size())
            throw PlanError("unknown shape '" + name + "' (" + form + ")");
        if (tp.kv_heads == kDefaultKvHeads)
            throw PlanError("shape '" + name + "': 8 KV heads is the default, written without -kv8");
    }
    StagingShape shape;
    try {
        shape = make_staging_shape(tokens, layers, tp);
    } catch (const PlanError& e) {
        throw PlanError("shape '" + name + "': " + e.what());
    }
    if (shape.name != name) throw PlanError("shape '" + name + "' is written " + shape.name);
    return shape;
}

std::vector<StagingShape> bench_shapes() {
    std::vector<StagingShape> out;
    for (int tokens : {256, 4096, 32768})
        for (const TpConfig& tp : {TpConfig{4, 2, 8}, TpConfig{2, 4, 8}, TpConfig{1, 4, 2}})
            out.push_back(make_staging_shape(tokens, 32, tp));
    return out;
}

std::vector<StagingShape> check_shapes() {
    return {
        make_staging_shape(1, 2, {4, 2, 8}),     // one token: a single partial page
        make_staging_shape(17, 3, {2, 4, 8}),    // a page and one token
        make_staging_shape(300, 2, {1, 4, 2}),   // TP1 -> TP4 with 2 heads: sources 0,0,1,1
        make_staging_shape(100, 1, {2, 2, 4}),   // equal TP
        make_staging_shape(33, 2, {1, 1, 1}),    // one rank each side, one head
        make_staging_shape(64, 2, {8, 2, 2}),    // fan-in, prefill ranks outnumber heads
        make_staging_shape(50, 2, {2, 8, 4}),    // fan-out, decode ranks outnumber heads
        make_staging_shape(40, 2, {4, 1, 8}),    // four writers into one reader
        make_staging_shape(24, 2, {8, 4, 2}),    // both sides replicated
        make_staging_shape(200, 4, {4, 2, 8}),
    };
}

}  // namespace lesson07
