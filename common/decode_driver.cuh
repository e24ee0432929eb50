// The host side every decode lesson shares: put a problem on the GPU, check a kernel
// against the reference, time it L2-hot and L2-cold, and turn that into rows.
//
//   shape -> make_decode_problem (host) -> DeviceDecodeProblem -> variant.launch
//         -> compare with the reference -> time_kernel -> ResultRow -> table / CSV
//
// The reference itself lives in reference/ and is passed in as a function, so common/
// stays free of the rest of the repository.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "decode_args.h"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "paged_cache.h"
#include "table.h"

namespace pa {

// A problem's tensors on the GPU. K and V exist in `copies` identical copies so that the
// L2-cold timing can rotate among them; copy 0 is the L2-hot one.
class DeviceDecodeProblem {
  public:
    DeviceDecodeProblem(const DecodeProblem& p, int copies = 1);
    PagedDecodeArgs args(int copy = 0);
    void poison_output() { out_.fill_bytes(0xff); }
    std::vector<uint16_t> download_output() const { return out_.download(); }
    int copies() const { return static_cast<int>(k_.size()); }
    long long kv_pool_bytes() const { return static_cast<long long>(k_[0].bytes() + v_[0].bytes()); }

  private:
    DecodeShape shape_;
    int max_blocks_per_seq_ = 0;
    float scale_ = 0;
    DeviceBuffer<uint16_t> q_, out_;
    DeviceBuffer<int> block_table_, context_lens_;
    std::vector<int> context_lens_host_;
    std::vector<DeviceBuffer<uint16_t>> k_, v_;
};

// Copies of a shape's K/V pools that the L2-cold timing rotates through (cold_copies of its
// pool size, decode_pool_bytes): pass to DeviceDecodeProblem.
int l2_cold_copies(const DecodeShape& s, const DeviceInfo& info);
int l2_cold_copies(const DecodeProblem& p, const DeviceInfo& info);

// What a launch looks like on this GPU, for the CTAs and waves columns.
struct LaunchGeometry {
    long long ctas = 0;    // CTAs in the grid
    int threads = 0;       // per CTA
    int smem_bytes = 0;    // dynamic shared memory per CTA
    int ctas_per_sm = 0;   // resident at once (occupancy calculator)
    int partitions = 1;    // CTAs that share one (sequence, KV head)'s tokens: split-k's partitions
    double waves(int sms) const { return ctas_per_sm > 0 ? static_cast<double>(ctas) / (static_cast<double>(sms) * ctas_per_sm) : 0; }
};

struct DecodeVariant {
    std::string name;
    // The lowest compute capability the variant runs on (90 for sm_90a's wgmma) and what it
    // needs there, for the one-line "unavailable on this GPU" listing.
    int min_cc = 80;
    std::string needs = "sm_80";
    std::string lesson;  // set for an earlier lesson's variant measured beside (its rows keep it)
    // Empty when the variant can run the shape on this GPU, else the reason it cannot.
    std::function<std::string(const DecodeShape&, const DeviceInfo&)> why_not;
    std::function<void(const PagedDecodeArgs&, cudaStream_t)> launch;
    std::function<LaunchGeometry(const DecodeShape&, const DeviceInfo&)> geometry;
};

using DecodeReference = std::function<std::vector<double>(const DecodeProblem&)>;

// Poison the output, launch once, wait, compare with `ref`.
CheckResult check_once(const DecodeVariant& v, DeviceDecodeProblem& dev, const DecodeProblem& p,
                       const std::vector<double>& ref, int copy = 0);

struct BenchSetup {
    DeviceInfo info;
    std::string lesson;   // "01"
    double read_bw_gbps = 0;
    int iters = 100;
    int warmup = 10;
};

// Bytes a decode must move: K and V of the real context, q, out, the used block-table
// entries and the context lengths.
long long decode_bytes_needed(const DecodeShape& s);

// A row with the columns that name the run and the shape filled in (gpu .. block_size).
ResultRow decode_row(const DeviceInfo& info, const std::string& lesson, const std::string& variant, const DecodeShape& s);

// For each variant: check, time L2-hot and L2-cold, check again. Two rows per variant
// (l2 = hot, cold), with extra columns ctas, ctas_per_sm, waves.
std::vector<ResultRow> bench_decode_shape(const BenchSetup& setup, const DecodeProblem& p, const std::vector<double>& ref,
                                          const std::vector<DecodeVariant>& variants);

// The standard printout: one line per (variant, shape), hot and cold side by side.
void print_decode_rows(const std::vector<ResultRow>& rows, const DeviceInfo& info, double read_bw_gbps);

// Header lines: GPU, CUDA version, measured read bandwidth.
void print_run_header(const std::string& title, const DeviceInfo& info, double read_bw_gbps);

// The check over a set of shapes: one line per (variant, shape) and `N/N PASS` (or FAIL),
// and a count of the (variant, shape) pairs skipped because the variant does not support
// the shape. Returns the number of failures.
int run_decode_checks(const std::vector<DecodeShape>& shapes, const std::vector<DecodeVariant>& variants,
                      const DecodeReference& reference, uint64_t seed, const DeviceInfo& info);

// A mode of one lesson, selected by its own flag (lesson 02's --timeline): the driver
// parses the flag, and runs `run` instead of the check and the measurement.
struct LessonMode {
    LessonFlag flag;
    std::function<int(const Flags&)> run;  // returns the exit code
};

// One run of the check and the measurement, for a lesson whose kernels and reference read a
// setting beyond the shape (lesson 05: the gate's sigma). `apply` makes the setting current
// before the pass's checks and measurements, and before `annotate` sees its rows.
struct LessonPass {
    std::string name;             // printed above the pass's check: "sigma 1.5"
    std::function<void()> apply;
};

// What a decode lesson's main() declares; run_decode_lesson does the rest.
struct DecodeLessonSpec {
    std::string program;                     // "lesson01_naive_decode"
    std::string lesson;                      // "01"
    std::string title;
    std::string extra_usage;
    std::vector<DecodeVariant> variants;
    // Earlier lessons' variants, measured beside this lesson's in a run without --variant
    // (not checked again: their own lesson does that).
    std::vector<DecodeVariant> baselines;
    // Variants run by the check but not measured (e.g. partitions too small to be worth timing).
    std::vector<DecodeVariant> check_only_variants;
    std::vector<DecodeShape> check_shapes;   // default --check set
    std::vector<DecodeShape> bench_shapes;   // default --bench set
    DecodeReference reference;
    // Extra columns of a measured row (e.g. which kernel `auto` picked).
    std::function<void(const DecodeShape&, ResultRow&)> annotate;
    // The lesson's own tables, printed after the measurement of a run without --variant;
    // `shapes` are the measured ones.
    std::function<void(const std::vector<ResultRow>& rows, const std::vector<DecodeShape>& shapes)> summarize;
    std::vector<LessonMode> modes;
    // Lesson flags that configure the run rather than replace it (lesson 05's --sigma); read
    // by `passes`.
    std::vector<LessonFlag> flags;
    // The passes of a run, in order (unset: one plain pass). May throw FlagError for a flag
    // value it refuses (exit code 2). Each shape's problem is made once and measured in
    // every pass.
    std::function<std::vector<LessonPass>(const Flags&)> passes;
};

// Splits off the variants this GPU cannot run (compute capability below min_cc), printing
// one line for each: "<name>: unavailable on <GPU> (sm_89): needs sm_90a (wgmma)".
std::vector<DecodeVariant> available_variants(const std::vector<DecodeVariant>& variants, const DeviceInfo& info);

// Finds a row by (shape, variant, l2) among a measurement's rows.
class RowIndex {
  public:
    explicit RowIndex(const std::vector<ResultRow>& rows);
    const ResultRow* get(const std::string& shape, const std::string& variant, const std::string& l2 = "cold") const;
    // "12.34" or "-" when there is no such row.
    std::string us(const std::string& shape, const std::string& variant, const std::string& l2 = "cold") const;
    // The fastest of `variants` on a shape (L2-cold median): {name, us}, or {"-", inf}.
    std::pair<std::string, double> best_of(const std::string& shape, const std::vector<std::string>& variants) const;

  private:
    std::vector<std::pair<std::string, const ResultRow*>> rows_;
};

int run_decode_lesson(int argc, char** argv, const DecodeLessonSpec& spec);

// The lesson's --help: the shared usage, its extra_usage, then every variant of its lists
// (generated, so it names exactly what --variant takes).
std::string decode_lesson_usage(const DecodeLessonSpec& spec);

// Exits with kExitBadInput and one line if a shape's pools do not fit (pools_why_not, with
// the copies a timed run makes when `timed`) or no variant in `variants` can run it.
void refuse_unrunnable_shapes(const std::string& program, const std::vector<DecodeShape>& shapes,
                              const std::vector<DecodeVariant>& variants, const DeviceInfo& info, bool timed);

// Selects variants by --variant (all when empty); exits with kExitBadInput on an unknown name.
std::vector<DecodeVariant> select_variants(const std::string& program, const std::string& name,
                                           const std::vector<DecodeVariant>& all);

// select_shapes, with errors reported as one line and exit code 2.
std::vector<DecodeShape> select_shapes_or_exit(const std::string& program, const Flags& f,
                                               const std::vector<DecodeShape>& defaults);

// Writes rows to --csv if given; exits with 2 (one line) if it cannot.
void write_csv_or_exit(const std::string& program, const std::string& path, const std::vector<ResultRow>& rows);


}  // namespace pa
