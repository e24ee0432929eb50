#include "smem_cap.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "flags.h"
#include "table.h"

namespace pa {

int parse_smem_cap_kib(const char* value) {
    if (value == nullptr || *value == '\0') return 0;
    errno = 0;
    char* end = nullptr;
    const long kib = std::strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || kib < 16 || kib > 1024)
        throw FlagError(strf("PA_SMEM_CAP_KIB='%s': expected a whole number of KiB from 16 to 1024 (99 for an RTX 4090, "
                             "163 for an A100)", value));
    return static_cast<int>(kib) * 1024;
}

int smem_cap_bytes() {
    static const int cap = parse_smem_cap_kib(std::getenv("PA_SMEM_CAP_KIB"));
    return cap;
}

int capped_smem_per_cta(int per_cta) {
    const int cap = smem_cap_bytes();
    return cap > 0 ? std::min(per_cta, cap) : per_cta;
}

int capped_smem_per_sm(int per_sm) {
    const int cap = smem_cap_bytes();
    return cap > 0 ? std::min(per_sm, cap + 1024) : per_sm;
}

std::string smem_cap_note() {
    const int cap = smem_cap_bytes();
    return cap > 0 ? strf(" (shared memory capped at %d KiB a CTA by PA_SMEM_CAP_KIB)", cap / 1024) : "";
}

}  // namespace pa
