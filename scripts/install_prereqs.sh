# shellcheck shell=bash
# Shared by scripts/run_lessons.sh and scripts/run_tests.sh (sourced, not run):
# find or install what the build needs, configure and build build/, and tell whether a
# GPU is visible. Every "cannot continue" case prints ONE line naming the missing piece
# and how to get it, then exits 1.
#
# Environment it honours:
#   PA_CMAKE_ARGS   extra arguments for the configure step, e.g.
#                   PA_CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=89" bash scripts/run_lessons.sh
#   CUDACXX         the nvcc to use (otherwise nvcc on PATH, then /usr/local/cuda/bin/nvcc)
#   CMAKE_PREFIX_PATH  where CMake looks for packages such as Catch2

PA_BUILD_DIR=${PA_BUILD_DIR:-build}
PA_MIN_CMAKE=3.25

pa_fail() {  # one line, then exit 1
    printf '%s\n' "$*" >&2
    exit 1
}

pa_jobs() {
    nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2
}

# Runs a command as root: directly when root, through sudo otherwise (non-interactive
# when there is no terminal to ask for a password). Fails when neither is possible.
pa_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        if [ -t 0 ]; then sudo "$@"; else sudo -n "$@"; fi
    else
        return 1
    fi
}

pa_can_apt() {
    command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; }
}

PA_APT_UPDATED=0
pa_apt_install() {  # pa_apt_install [apt-get install options] packages...
    if [ "$PA_APT_UPDATED" -eq 0 ]; then
        pa_as_root apt-get update -q || return 1
        PA_APT_UPDATED=1
    fi
    pa_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

pa_os_field() {  # pa_os_field ID | VERSION_CODENAME
    [ -r /etc/os-release ] || return 0
    (
        # shellcheck disable=SC1091
        . /etc/os-release
        case "$1" in
            ID) printf '%s' "${ID:-}" ;;
            VERSION_CODENAME) printf '%s' "${VERSION_CODENAME:-}" ;;
        esac
    )
}

pa_version_ge() {  # pa_version_ge 3.25.1 3.25
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

pa_cmake_version() {  # empty when there is no cmake
    command -v cmake >/dev/null 2>&1 || return 0
    cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p' | head -n1 || true
}

pa_ensure_cmake() {
    local v
    v=$(pa_cmake_version)
    if { [ -z "$v" ] || ! pa_version_ge "$v" "$PA_MIN_CMAKE"; } && pa_can_apt; then
        echo "CMake >= $PA_MIN_CMAKE not found${v:+ (found $v)}: trying apt-get install cmake"
        pa_apt_install cmake || true
        hash -r
        v=$(pa_cmake_version)
    fi
    if [ -z "$v" ] || ! pa_version_ge "$v" "$PA_MIN_CMAKE"; then
        pa_fail "CMake >= $PA_MIN_CMAKE is needed${v:+ (found $v)}: install it from https://cmake.org/download/ or with 'pip install cmake', then run this again."
    fi
}

pa_have_cxx() {
    if [ -n "${CXX:-}" ]; then command -v "$CXX" >/dev/null 2>&1; return; fi
    command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1
}

pa_ensure_cxx() {
    if ! pa_have_cxx && pa_can_apt; then
        echo "no C++ compiler found: trying apt-get install g++"
        pa_apt_install g++ || true
        hash -r
    fi
    pa_have_cxx || pa_fail "A C++17 compiler is needed (g++ or clang++; CXX=${CXX:-unset}): install one, e.g. 'apt-get install g++', then run this again."
}

pa_ensure_build_tools() {  # everything both scripts need before configuring
    pa_ensure_cmake
    pa_ensure_cxx
    pa_ensure_nvcc
}

pa_ensure_nvcc() {
    if [ -n "${CUDACXX:-}" ] && [ -x "$CUDACXX" ]; then
        return 0
    fi
    if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi
    command -v nvcc >/dev/null 2>&1 || pa_fail "nvcc (the CUDA compiler) is not on PATH nor in /usr/local/cuda/bin: install the CUDA Toolkit (12.x or newer) from https://developer.nvidia.com/cuda-downloads and put its bin/ on PATH."
}

# Catch2 v3, as CMake's find_package sees it: configure a two-line project.
pa_catch2_found() {
    local probe rc
    probe=$(mktemp -d)
    printf 'cmake_minimum_required(VERSION 3.25)\nproject(catch2_probe NONE)\nfind_package(Catch2 3 REQUIRED)\n' >"$probe/CMakeLists.txt"
    # shellcheck disable=SC2086  # PA_CMAKE_ARGS is a list of words on purpose
    if cmake -S "$probe" -B "$probe/build" ${PA_CMAKE_ARGS:-} >/dev/null 2>&1; then rc=0; else rc=1; fi
    rm -rf "$probe"
    return $rc
}

pa_ensure_catch2() {
    pa_catch2_found && return 0
    local id codename
    id=$(pa_os_field ID)
    codename=$(pa_os_field VERSION_CODENAME)
    if pa_can_apt; then
        if [ "$id" = debian ] && [ "$codename" = bookworm ]; then
            echo "Catch2 v3 not found: installing it from bookworm-backports"
            if ! grep -qs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
                echo 'deb http://deb.debian.org/debian bookworm-backports main' |
                    pa_as_root tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null || true
                PA_APT_UPDATED=0
            fi
            pa_apt_install -t bookworm-backports catch2 || true
        elif [ "$id" = debian ] || [ "$id" = ubuntu ]; then
            # Ubuntu 24.04 (noble) and Debian 13 (trixie) ship Catch2 v3 as `catch2`
            echo "Catch2 v3 not found: trying apt-get install catch2"
            pa_apt_install catch2 || true
        fi
        pa_catch2_found && return 0
    fi
    pa_fail "Catch2 v3 is needed for the tests and could not be installed here: install it (Debian 12: apt-get install -t bookworm-backports catch2; Ubuntu 24.04: apt-get install catch2; elsewhere build v3 from https://github.com/catchorg/Catch2) or point CMAKE_PREFIX_PATH at it, then run this again."
}

# Python 3 (standard library only) for the tests that check the README tables against the
# CSVs (plots/tables.py); the test configure step fails without it.
pa_ensure_python3() {
    command -v python3 >/dev/null 2>&1 && return 0
    if pa_can_apt; then
        echo "python3 not found: trying apt-get install python3"
        pa_apt_install python3 || true
        hash -r
    fi
    command -v python3 >/dev/null 2>&1 || pa_fail "Python 3 is needed for the README table tests (plots/tables.py) and could not be installed here: install python3 (e.g. 'apt-get install python3'), then run this again."
}

# matplotlib for the tests that draw every plot from small CSVs (plots/test_plots.py); the
# lessons themselves never need it.
# apt installs for the system's /usr/bin/python3; when `python3` on PATH is another one (a
# pyenv or venv interpreter), the tests are pointed at the system one (Python3_EXECUTABLE).
pa_ensure_matplotlib() {
    python3 -c 'import matplotlib' >/dev/null 2>&1 && return 0
    if pa_can_apt; then
        echo "matplotlib not found for python3: trying apt-get install python3-matplotlib"
        pa_apt_install python3-matplotlib || true
    fi
    python3 -c 'import matplotlib' >/dev/null 2>&1 && return 0
    if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; then
        echo "python3 on PATH ($(command -v python3)) has no matplotlib; the tests use /usr/bin/python3, which has it"
        PA_CMAKE_ARGS="${PA_CMAKE_ARGS:-} -DPython3_EXECUTABLE=/usr/bin/python3"
        return 0
    fi
    pa_fail "matplotlib is needed for the plot tests (plots/test_plots.py) and could not be installed here: install it (e.g. 'apt-get install python3-matplotlib' or 'pip install matplotlib'), then run this again."
}

# Configure build/ (reusing its generator if it exists) and build it on every core.
pa_configure_and_build() {  # pa_configure_and_build -DPA_BUILD_TESTS=ON|OFF
    local gen=()
    if [ ! -f "$PA_BUILD_DIR/CMakeCache.txt" ]; then
        if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); else gen=(-G "Unix Makefiles"); fi
    fi
    # shellcheck disable=SC2086
    cmake -S . -B "$PA_BUILD_DIR" "${gen[@]}" "$@" ${PA_CMAKE_ARGS:-}
    cmake --build "$PA_BUILD_DIR" --parallel "$(pa_jobs)"
}

# True when nvidia-smi lists a GPU and CUDA_VISIBLE_DEVICES does not hide them all.
pa_gpu_visible() {
    case "${CUDA_VISIBLE_DEVICES-unset}" in
        "" | -1 | NoDevFiles) return 1 ;;
    esac
    command -v nvidia-smi >/dev/null 2>&1 || return 1
    local list
    list=$(nvidia-smi -L 2>/dev/null) || return 1
    grep -q '^GPU' <<<"$list"
}

# The GPU's short name for plots/data/<gpu>/: the same names the lessons write in their
# CSV `gpu` column (common/device_info.cu): h200, h100, a100, l40s, l4, rtx-4090,
# rtx-3090, else the name in lower case with '-' for every other character.
pa_gpu_short_name() {
    local name="" lower known
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "${CUDA_VISIBLE_DEVICES%%,*}" 2>/dev/null | head -n1) || name=""
    fi
    [ -n "$name" ] || name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1) || true
    lower=$(printf '%s' "$name" | tr '[:upper:]' '[:lower:]')
    for known in h200 h100 a100 l40s l4 "rtx 4090" "rtx 3090"; do
        case "$lower" in
            *"$known"*) printf '%s\n' "${known// /-}"; return 0 ;;
        esac
    done
    printf '%s\n' "$lower" | sed 's/[^a-z0-9]/-/g'
}
