// Lesson 04's arithmetic on the host, plain C++ (no CUDA: the CPU tests build it anywhere).
//
//   - how many segments (partitions) a context needs, the power of two above that, and
//     what the scratch of each fix costs in bytes;
//   - the partition size the lesson's pipelines use for a shape;
//   - host models of the reduces: the merge of per-segment (m, l, acc) written once in
//     double (the textbook form) and once in float in exactly the order each kernel adds,
//     so that the CPU tests can show which orders ignore sentinel segments bit for bit.
//
// The merge, for one (sequence, query head) whose context was cut into segments s:
//   m_s = max logit of s, l_s = sum e^(logit - m_s), acc_s = sum e^(logit - m_s) v
//   M = max_s m_s,  w_s = e^(m_s - M),  out = sum_s w_s acc_s / sum_s w_s l_s
// A sentinel segment (-inf, 0, 0) gets w_s = e^(-inf - M) = 0 and drops out, as long as M
// is finite: segment 0 always holds a token, so it is.
#pragma once

#include <string>
#include <vector>

namespace lesson04 {

// The widest reduce built: SEGMENTS_P2 = 1, 2, 4, ..., 1024 (ctx 128k at partition 128).
constexpr int kMaxSegments = 1024;
// The partition sizes lesson 03's partition kernel takes.
constexpr int kPartitionSizes[] = {32, 64, 128, 256, 512};

// The smallest power of two >= n (1 for n <= 1).
int next_pow2(int n);
// ceil(ctx / partition_size): the segments (partitions) a context of ctx tokens needs.
int segments_for(int ctx, int partition_size);
// The partition size the lesson's pipelines use for a batch whose longest context is
// max_ctx: the smallest of kPartitionSizes giving at most kMaxSegments segments (many
// segments on purpose: the reduce is what this lesson is about); 0 when none does.
int pick_partition_size(int max_ctx);
bool is_partition_size(int partition_size);

// The three reduces (CSV variant names pad_scratch, pow2_lanes, loop).
enum class Fix {
    pad_scratch,  // the wrong fix: scratch and forward grid padded to next_pow2(segments)
    pow2_lanes,   // the right fix: next_pow2 lanes inside the reduce only, padding lanes read -inf
    loop,         // the comparison: a plain loop over the segments
};
const char* fix_name(Fix f);
// Parses a variant name; false when it names none.
bool parse_fix(const std::string& name, Fix* out);
std::vector<Fix> all_fixes();

// Scratch entries per (sequence, query head) a fix allocates for `segments` segments.
int scratch_partitions(Fix f, int segments);
// Bytes of scratch: (m, l, D floats of acc) per entry, B * H * partitions entries.
long long scratch_bytes(int B, int H, int D, int partitions);

// ---- host models of the merge ----------------------------------------------------------

// One (sequence, head)'s entries as the reduce reads them: m[count], l[count], acc[count][D].
struct SegmentsView {
    const float* m = nullptr;
    const float* l = nullptr;
    const float* acc = nullptr;
    int count = 0;
    int D = 0;
};

// What the partition kernel writes for one head, in double: the logits and V rows of a
// context cut at `cuts` (segment s = tokens [cuts[s], cuts[s + 1])), each segment's
// (m, l, acc). An empty segment gets the sentinel (-inf, 0, 0).
struct PartialsD {
    std::vector<double> m, l, acc;  // acc: [segments][D]
};
PartialsD partials_of(const std::vector<double>& logits, const std::vector<double>& v, int D,
                      const std::vector<int>& cuts);
// out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s, in double.
std::vector<double> merge_exact(const PartialsD& p, int D);
// softmax(logits) . v without any split, in double.
std::vector<double> softmax_exact(const std::vector<double>& logits, const std::vector<double>& v, int D);

// The pow2_lanes (and pad_scratch) kernel's arithmetic in float, in its order: segments on
// lanes, M and L by butterflies over min(segments_p2, 32) lanes and then over the warps;
// the output by groups of max(1, D/32) consecutive segments walked in order with fma, the
// groups then folded in halves. segments_p2 >= s.count, a power of two; padding lanes read (-inf, 0).
// (Host expf may differ from the GPU's in the last bit: this models the order, not the ulps.)
std::vector<float> pow2_merge_model(const SegmentsView& s, int segments_p2);
// The loop kernel's arithmetic in float: M over the segments in order, then L and the
// output accumulated with fma, segment by segment.
std::vector<float> loop_merge_model(const SegmentsView& s);

}  // namespace lesson04
