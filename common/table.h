// Result rows, the printed tables and the CSV files every lesson writes.
//
// Every CSV starts with these columns, in this order (CONVENTIONS.md):
//   gpu, lesson, variant, shape, dtype, B, H, Hkv, D, ctx, block_size, l2, us_median,
//   us_min, bytes, gbps, pct_read_bw, flops, tflops, pct_mma_peak, check, rel_err,
//   read_bw_gbps, mma_peak_tflops
// and a lesson may add more after them (`extra`). A column that does not apply is empty.
// read_bw_gbps and mma_peak_tflops are the ceilings measured in the same run that
// pct_read_bw and pct_mma_peak are percentages of (common/ceilings.cuh).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pa {

struct ResultRow {
    std::string gpu, lesson, variant, shape, dtype;
    int B = 0, H = 0, Hkv = 0, D = 0;
    std::string ctx;  // one length, or "mixed"
    int block_size = 0;
    std::string l2;   // "hot" or "cold"
    double us_median = 0, us_min = 0;
    std::optional<double> bytes, gbps, pct_read_bw, flops, tflops, pct_mma_peak;
    std::string check;  // "PASS" or "FAIL"
    std::optional<double> rel_err;
    std::optional<double> read_bw_gbps, mma_peak_tflops;  // the ceilings of pct_read_bw, pct_mma_peak
    std::vector<std::pair<std::string, std::string>> extra;  // lesson columns, after the required ones

    void set_extra(const std::string& key, const std::string& value);
    std::string get_extra(const std::string& key) const;  // "" when absent
};

// Writes rows as CSV (header: required columns, then each extra key in order of first use).
// Returns false and sets `error` if the file cannot be written.
bool write_csv(const std::string& path, const std::vector<ResultRow>& rows, std::string* error);

// A plain fixed-width text table.
class TextTable {
  public:
    explicit TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}
    void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
    void print(std::FILE* f = stdout) const;
    bool empty() const { return rows_.empty(); }

  private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

// printf into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace pa
