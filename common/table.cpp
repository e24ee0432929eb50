#include "table.h"

#include <algorithm>
#include <cstdarg>
#include <fstream>

namespace pa {

void ResultRow::set_extra(const std::string& key, const std::string& value) {
    for (auto& kv : extra)
        if (kv.first == key) { kv.second = value; return; }
    extra.emplace_back(key, value);
}

std::string ResultRow::get_extra(const std::string& key) const {
    for (const auto& kv : extra)
        if (kv.first == key) return kv.second;
    return "";
}

std::string strf(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

namespace {

std::string num(const std::optional<double>& v, const char* fmt) { return v ? strf(fmt, *v) : std::string(); }

std::string csv_escape(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string out = "\"";
    for (char c : s) out += (c == '"') ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

}  // namespace

bool write_csv(const std::string& path, const std::vector<ResultRow>& rows, std::string* error) {
    std::ofstream f(path);
    if (!f) {
        if (error) *error = "cannot open '" + path + "' for writing";
        return false;
    }
    std::vector<std::string> extra_keys;
    for (const auto& r : rows)
        for (const auto& kv : r.extra)
            if (std::find(extra_keys.begin(), extra_keys.end(), kv.first) == extra_keys.end()) extra_keys.push_back(kv.first);

    f << "gpu,lesson,variant,shape,dtype,B,H,Hkv,D,ctx,block_size,l2,us_median,us_min,bytes,gbps,pct_read_bw,"
         "flops,tflops,pct_mma_peak,check,rel_err,read_bw_gbps,mma_peak_tflops";
    for (const auto& k : extra_keys) f << ',' << csv_escape(k);
    f << '\n';
    for (const auto& r : rows) {
        f << csv_escape(r.gpu) << ',' << csv_escape(r.lesson) << ',' << csv_escape(r.variant) << ',' << csv_escape(r.shape)
          << ',' << r.dtype << ',' << r.B << ',' << r.H << ',' << r.Hkv << ',' << r.D << ',' << r.ctx << ','
          << r.block_size << ',' << r.l2 << ',' << strf("%.3f", r.us_median) << ',' << strf("%.3f", r.us_min) << ','
          << num(r.bytes, "%.0f") << ',' << num(r.gbps, "%.1f") << ',' << num(r.pct_read_bw, "%.1f") << ','
          << num(r.flops, "%.0f") << ',' << num(r.tflops, "%.2f") << ',' << num(r.pct_mma_peak, "%.1f") << ','
          << r.check << ',' << num(r.rel_err, "%.3e") << ',' << num(r.read_bw_gbps, "%.1f") << ','
          << num(r.mma_peak_tflops, "%.1f");
        for (const auto& k : extra_keys) f << ',' << csv_escape(r.get_extra(k));
        f << '\n';
    }
    f.close();
    if (!f) {
        if (error) *error = "writing '" + path + "' failed";
        return false;
    }
    return true;
}

void TextTable::print(std::FILE* f) const {
    std::vector<size_t> width(headers_.size());
    for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
    for (const auto& r : rows_)
        for (size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s;
        for (size_t c = 0; c < width.size(); ++c) {
            const std::string cell = c < cells.size() ? cells[c] : "";
            // first column left-aligned (names), the rest right-aligned (numbers)
            if (c == 0) s += cell + std::string(width[c] - cell.size(), ' ');
            else s += "  " + std::string(width[c] - cell.size(), ' ') + cell;
        }
        while (!s.empty() && s.back() == ' ') s.pop_back();
        std::fprintf(f, "%s\n", s.c_str());
    };
    line(headers_);
    size_t total = 0;
    for (size_t w : width) total += w + 2;
    std::fprintf(f, "%s\n", std::string(total > 2 ? total - 2 : 0, '-').c_str());
    for (const auto& r : rows_) line(r);
}

}  // namespace pa
