#!/usr/bin/env bash
# Reproduces every measurement of this repository on the GPU at hand, in one command:
#   1. builds everything (build/) and runs every lesson's check and measurement through
#      scripts/run_lessons.sh, writing plots/data/<gpu>/lessonNN.csv;
#   2. times the peers on the same shapes, with the same L2-hot / L2-cold regimes and the
#      same CSV columns: PyTorch's SDPA (flash and cuDNN backends, peers/sdpa_peer.py) into
#      peers_sdpa.csv, and FlashInfer (peers/flashinfer, built in build-flashinfer/) into
#      peers_flashinfer.csv, each where it is available;
#   3. draws the plots (plots/plot_*.py) and writes plots/TABLES.md (plots/make_tables_md.py)
#      and the README tables (plots/tables.py) from the CSVs.
# It says which step it is on as it goes; a lesson or a peer that cannot run here is named
# with the reason in one line, and the rest goes on. At the end it lists what it wrote.
#
#   bash scripts/reproduce.sh                   everything
#   bash scripts/reproduce.sh --lessons 01,03   only these lessons ("none": no lesson)
#   bash scripts/reproduce.sh --quick           the peers on a few shapes with fewer timed launches
#                                               (with --lessons, a quick end-to-end try)
#   bash scripts/reproduce.sh --flashinfer DIR  FlashInfer's include folder (the one holding
#                                               flashinfer/); default: $PA_FLASHINFER_INCLUDE, else
#                                               .flashinfer/include (scripts/get_flashinfer_headers.sh),
#                                               else an installed flashinfer-python's data/include
#   bash scripts/reproduce.sh --no-peers | --no-plots
#
# Environment: PA_CMAKE_ARGS (as run_lessons.sh), PA_PYTHON (the Python with PyTorch and
# matplotlib; default python3).
# Exit code: 0 everything that ran passed; 1 a lesson or a peer failed its check, or a step
# failed; 2 bad arguments; 3 no usable GPU (nothing is measured; the lessons' own code for it).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=scripts/install_prereqs.sh
. scripts/install_prereqs.sh

lessons_arg=""
quick=0
peers=1
plots=1
fi_dir="${PA_FLASHINFER_INCLUDE:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --lessons) [ $# -ge 2 ] || { echo "error: --lessons needs a value, e.g. --lessons 01,03 or none" >&2; exit 2; }; lessons_arg=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --no-peers) peers=0; shift ;;
        --no-plots) plots=0; shift ;;
        --flashinfer) [ $# -ge 2 ] || { echo "error: --flashinfer needs a folder" >&2; exit 2; }; fi_dir=$2; shift 2 ;;
        -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ -n "$lessons_arg" ] && [ "$lessons_arg" != none ] && ! [[ "$lessons_arg" =~ ^[0-9]{2}(,[0-9]{2})*$ ]]; then
    echo "error: --lessons takes two-digit lesson numbers separated by commas (e.g. 01,03) or none, got '$lessons_arg'" >&2
    exit 2
fi
PY=${PA_PYTHON:-python3}

start=$(date +%s)
stamp=$(mktemp)  # files newer than this were written by this run
trap 'rm -f "$stamp"' EXIT
skipped=()  # "what: why", one line each
failed=()
step() { printf '\n==> %s\n' "$*"; }
elapsed() { printf '%dm%02ds' $((($(date +%s) - start) / 60)) $((($(date +%s) - start) % 60)); }

# -- a GPU? -------------------------------------------------------------------------------
if ! pa_gpu_visible; then
    echo "No CUDA GPU visible (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them): nothing to measure. Exit code 3."
    exit 3
fi

# -- build ------------------------------------------------------------------------------
step "[build] configuring and building every lesson and the peers' helper into $PA_BUILD_DIR/ (log: $PA_BUILD_DIR/reproduce-build.log)"
pa_ensure_build_tools
mkdir -p "$PA_BUILD_DIR"
if ! (pa_configure_and_build -DPA_BUILD_TESTS=OFF) >"$PA_BUILD_DIR/reproduce-build.log" 2>&1; then
    grep -m3 -E 'error|Error' "$PA_BUILD_DIR/reproduce-build.log" | sed 's/^/    /'
    echo "the build failed: see $PA_BUILD_DIR/reproduce-build.log"
    exit 1
fi
echo "built ($(elapsed))"

# The GPU's name and its ceilings; a GPU that nvidia-smi lists but CUDA cannot use ends here.
info_file="$PA_BUILD_DIR/peer_info.txt"
info_rc=0
"$PA_BUILD_DIR/bin/peer_info" >"$info_file" 2>&1 || info_rc=$?
if [ "$info_rc" -eq 3 ]; then
    echo "$(tail -n1 "$info_file"): nothing to measure. Exit code 3."
    exit 3
elif [ "$info_rc" -ne 0 ]; then
    echo "peer_info failed (exit $info_rc): $(tail -n1 "$info_file")"
    exit 1
fi
gpu=$(sed -n 's/^gpu //p' "$info_file")
[ -n "$gpu" ] || gpu=$(pa_gpu_short_name)
data="plots/data/$gpu"
mkdir -p "$data"
echo "GPU: $(sed -n 's/^name //p' "$info_file") ($gpu); streaming read $(sed -n 's/^read_bw_gbps //p' "$info_file") GB/s, dense bf16 $(sed -n 's/^bf16_tflops //p' "$info_file") TFLOP/s"

# -- lessons ----------------------------------------------------------------------------
built=()
while IFS= read -r exe; do
    nn=$(basename "$exe" | cut -c7-8)
    if [ -n "$lessons_arg" ] && [[ ",$lessons_arg," != *",$nn,"* ]]; then continue; fi
    built+=("$nn")
done < <(find "$PA_BUILD_DIR/bin" -maxdepth 1 -name 'lesson[0-9][0-9]_*' ! -name '*_exercise*' -perm -u+x | LC_ALL=C sort)
# Lessons with no executable: CMake skipped them for this GPU's architecture (its configure
# output, in the build log, says why), or there is no such lesson.
wanted=()
if [ -z "$lessons_arg" ]; then
    for d in lessons/[0-9][0-9]_*/; do wanted+=("$(basename "$d" | cut -c1-2)"); done
elif [ "$lessons_arg" != none ]; then
    read -ra wanted <<<"${lessons_arg//,/ }"
fi
for nn in "${wanted[@]}"; do
    [[ " ${built[*]} " != *" $nn "* ]] || continue
    why=$(grep -m1 "^-- lesson$nn: skipped" "$PA_BUILD_DIR/reproduce-build.log" | sed 's/^-- //')
    skipped+=("lesson $nn: no executable: ${why:-no such lesson, or not built (see $PA_BUILD_DIR/reproduce-build.log)}")
done
if [ "$lessons_arg" = none ] || [ "${#built[@]}" -eq 0 ]; then
    step "[lessons] none to run"
else
    list=$(IFS=,; echo "${built[*]}")
    n=${#built[@]}
    step "[lessons] $n to run ($list): each checks, then measures; rows to $data/lessonNN.csv (log: $PA_BUILD_DIR/reproduce-lessons.log)"
    : >"$PA_BUILD_DIR/reproduce-lessons.log"
    k=0
    last_line=""
    declare -A why_line=()
    current=""
    lesson_start=$(date +%s)
    # The lessons' output goes by line (stdbuf, where there is one: their stdout is a pipe
    # here); run_lessons.sh's own headers ("===== lessonNN_x (CSV: ...) =====") become
    # numbered steps, and a lesson that prints nothing for a minute (it measures every shape
    # before printing its table) gets a line saying it is still at work.
    linebuf=()
    command -v stdbuf >/dev/null 2>&1 && linebuf=(stdbuf -oL -eL)
    pending=""
    while true; do
        if IFS= read -r -t 60 part; then
            line=$pending$part
            pending=""
        else
            [ $? -gt 128 ] || break  # the end of run_lessons.sh's output
            pending+=$part           # a timeout: keep any partial line for the next read
            [ -z "$current" ] || printf '    ... %s is still measuring (%s so far)\n' "$current" "$(elapsed)"
            continue
        fi
        printf '%s\n' "$line" >>"$PA_BUILD_DIR/reproduce-lessons.log"
        [[ "$line" != "run_lessons.sh exit code "* ]] || continue
        if [[ "$line" =~ ^=====\ (lesson[0-9][0-9]_[A-Za-z0-9_]+)\ (--(timeline|plans)\ )?\(CSV:\ (.*)\)\ =====$ ]]; then
            [ -z "$current" ] || echo "    ($current took $(($(date +%s) - lesson_start)) s)"
            [ -z "$current" ] || why_line[$current]=$last_line
            current=${BASH_REMATCH[1]}
            lesson_start=$(date +%s)
            if [ -z "${BASH_REMATCH[2]}" ]; then k=$((k + 1)); fi
            printf '\n==> [lesson %d/%d] %s%s -> %s   (%s so far)\n' "$k" "$n" "$current" \
                "${BASH_REMATCH[3]:+ --${BASH_REMATCH[3]}}" "${BASH_REMATCH[4]}" "$(elapsed)"
            continue
        fi
        [ -z "${line// /}" ] || last_line=$line
        # before the first lesson: run_lessons.sh's (no-op) configure and build, kept in the log
        if [ -n "$current" ] || [[ "$line" == *rror* ]] || [[ "$line" == "No CUDA GPU"* ]]; then printf '%s\n' "$line"; fi
    done < <("${linebuf[@]}" bash scripts/run_lessons.sh --lessons "$list" 2>&1; echo "run_lessons.sh exit code $?")
    [ -z "$current" ] || why_line[$current]=$last_line
    rl_rc=$(grep -o 'run_lessons.sh exit code [0-9]*' "$PA_BUILD_DIR/reproduce-lessons.log" | tail -n1 | awk '{print $4}')
    # run_lessons.sh names the lessons this GPU cannot run, and the failed ones, in its last lines.
    sk=$(grep '^skipped on this GPU' "$PA_BUILD_DIR/reproduce-lessons.log" | tail -n1 | sed 's/^[^:]*: //')
    for name in $sk; do skipped+=("$name: cannot run on this GPU: ${why_line[$name]:-see $PA_BUILD_DIR/reproduce-lessons.log}"); done
    if grep -q '^No CUDA GPU visible' "$PA_BUILD_DIR/reproduce-lessons.log"; then
        skipped+=("lessons: the first one said it cannot use this GPU (${why_line[$current]:-see $PA_BUILD_DIR/reproduce-lessons.log}), so run_lessons.sh ran none")
    fi
    fl=$(grep '^FAILED: ' "$PA_BUILD_DIR/reproduce-lessons.log" | tail -n1 | sed 's/^FAILED: //')
    [ -z "$fl" ] || failed+=("lessons: $fl (their output above says what failed)")
    [ "${rl_rc:-1}" -eq 0 ] || [ -n "$fl" ] || failed+=("scripts/run_lessons.sh exited with ${rl_rc:-?}")
fi

# -- peers ------------------------------------------------------------------------------
find_flashinfer() {  # prints FlashInfer's include folder, or nothing
    local d
    for d in "$fi_dir" .flashinfer/include; do
        if [ -n "$d" ] && [ -f "$d/flashinfer/attention/decode.cuh" ]; then (cd "$d" && pwd); return; fi
    done
    # an installed flashinfer-python (found without importing it, which would load PyTorch)
    d=$("$PY" -c 'import importlib.util as u, os; s = u.find_spec("flashinfer"); print(os.path.join(list(s.submodule_search_locations)[0], "data", "include") if s else "")' 2>/dev/null) || d=""
    if [ -n "$d" ] && [ -f "$d/flashinfer/attention/decode.cuh" ]; then echo "$d"; fi
}

if [ "$peers" -eq 0 ]; then
    step "[peers] skipped (--no-peers)"
else
    quick_flag=()
    iters=()
    if [ "$quick" -eq 1 ]; then quick_flag=(--quick); iters=(--iters 30); fi

    step "[peer 1/2] PyTorch SDPA (flash and cuDNN backends) -> $data/peers_sdpa.csv"
    torch_why=$("$PY" -c 'import torch; print("" if torch.cuda.is_available() else "PyTorch " + torch.__version__ + " sees no CUDA GPU")' 2>/dev/null) ||
        torch_why="PyTorch is not importable by $PY (pip install torch)"
    if [ -n "$torch_why" ]; then
        echo "skipped: $torch_why"
        skipped+=("peer sdpa_flash, sdpa_cudnn: $torch_why")
    else
        rc=0
        PYTHONUNBUFFERED=1 "$PY" peers/sdpa_peer.py --peer-info "$PA_BUILD_DIR/bin/peer_info" --csv "$data/peers_sdpa.csv" \
            "${quick_flag[@]}" "${iters[@]}" || rc=$?
        case "$rc" in
            0) ;;
            1) failed+=("peer sdpa: a check failed (its FAIL lines above)") ;;
            *) failed+=("peer sdpa: peers/sdpa_peer.py exited with $rc") ;;
        esac
    fi

    step "[peer 2/2] FlashInfer (BatchDecode, tensor-core decode, BatchPrefill on this repository's paged cache) -> $data/peers_flashinfer.csv"
    fi_inc=$(find_flashinfer)
    if [ -z "$fi_inc" ]; then
        why="no FlashInfer headers (pip install flashinfer-python, or bash scripts/get_flashinfer_headers.sh, or --flashinfer DIR)"
        echo "skipped: $why"
        skipped+=("peer flashinfer_*: $why")
    else
        fi_build=build-flashinfer
        echo "headers: $fi_inc; building peer_flashinfer in $fi_build/ (log: $fi_build/build.log)"
        mkdir -p "$fi_build"
        gen=()
        [ -f "$fi_build/CMakeCache.txt" ] || { command -v ninja >/dev/null 2>&1 && gen=(-G Ninja); }
        # shellcheck disable=SC2086  # PA_CMAKE_ARGS is a list of words on purpose
        if cmake -S . -B "$fi_build" "${gen[@]}" -DPA_BUILD_TESTS=OFF -DPA_FLASHINFER_INCLUDE="$fi_inc" ${PA_CMAKE_ARGS:-} \
                >"$fi_build/build.log" 2>&1 &&
            cmake --build "$fi_build" --target peer_flashinfer --parallel "$(pa_jobs)" >>"$fi_build/build.log" 2>&1; then
            "$fi_build/bin/peer_flashinfer" --csv "$data/peers_flashinfer.csv" "${quick_flag[@]}" "${iters[@]}" 2>&1 |
                tee "$fi_build/run.log"
            rc=${PIPESTATUS[0]}
            case "$rc" in
                0) ;;
                1) failed+=("peer flashinfer: a check failed or it stopped (its lines above)") ;;
                3) skipped+=("peer flashinfer_*: $(tail -n1 "$fi_build/run.log")") ;;
                *) failed+=("peer flashinfer: peer_flashinfer exited with $rc") ;;
            esac
        else
            err=$(grep -m1 -E 'error|Error' "$fi_build/build.log" | cut -c1-200)
            echo "skipped: its build failed: ${err:-see the log}"
            skipped+=("peer flashinfer_*: its build failed (${err:-see $fi_build/build.log}; log: $fi_build/build.log)")
        fi
    fi
fi

# -- plots and tables ------------------------------------------------------------------
if [ "$plots" -eq 0 ]; then
    step "[plots] skipped (--no-plots)"
elif ! mpl_err=$("$PY" -c 'import matplotlib' 2>&1); then
    step "[plots] skipped: matplotlib is not importable by $PY (pip install matplotlib): $(tail -n1 <<<"$mpl_err")"
    skipped+=("plots: matplotlib is not importable by $PY (pip install matplotlib)")
else
    scripts=(plot_decode plot_split_k plot_sparse_p plot_prefill plot_staging)
    i=0
    for s in "${scripts[@]}"; do
        i=$((i + 1))
        step "[plot $i/${#scripts[@]}] plots/$s.py --gpu $gpu"
        "$PY" "plots/$s.py" --gpu "$gpu" || failed+=("plots/$s.py exited with $?")
    done
fi

step "[tables] plots/TABLES.md (plots/make_tables_md.py) and the README tables (plots/tables.py)"
"$PY" plots/make_tables_md.py || failed+=("plots/make_tables_md.py exited with $?")
if ! out=$("$PY" plots/tables.py 2>&1); then
    printf '%s\n' "$out"
    skipped+=("README tables: some not rewritten ($(grep -v 'rewritten$' <<<"$out" | head -n1))")
else
    printf '%s\n' "$out"
fi

# -- what it wrote -------------------------------------------------------------------------
step "done in $(elapsed) on $gpu"
echo "wrote:"
written=0
while IFS= read -r f; do
    case "$f" in
        *.csv) echo "  $f ($(($(wc -l <"$f") - 1)) rows)" ;;
        *) echo "  $f" ;;
    esac
    written=$((written + 1))
done < <(find "$data" plots/TABLES.md plots -maxdepth 1 -type f \( -name '*.csv' -o -name '*.png' -o -name 'TABLES.md' \) \
    -newer "$stamp" 2>/dev/null | LC_ALL=C sort -u)
while IFS= read -r f; do echo "  $f (tables rewritten)"; written=$((written + 1)); done < <(
    find README.md lessons -maxdepth 2 -name README.md -newer "$stamp" 2>/dev/null | LC_ALL=C sort)
[ "$written" -gt 0 ] || echo "  nothing"
if [ "${#skipped[@]}" -gt 0 ]; then
    echo "not run here:"
    printf '  %s\n' "${skipped[@]}"
fi
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
echo "everything that ran passed"
exit 0
