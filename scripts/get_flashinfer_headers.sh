#!/usr/bin/env bash
# Fetches FlashInfer's headers for the FlashInfer peer (peers/flashinfer) without installing
# FlashInfer: downloads the flashinfer-python wheel (no dependencies) with pip and unpacks, into
# .flashinfer/ (git-ignored, never committed), the folders the peer compiles against:
#   .flashinfer/include                 FlashInfer's headers (the wheel's flashinfer/data/include)
#   .flashinfer/cccl/libcudacxx/include the CCCL they need (newer than CUDA 13.0's own)
#   .flashinfer/cutlass/include         CUTLASS/CuTe, for the Hopper (sm_90a) prefill kernels
#   .flashinfer/cutlass/tools/util/include  CUTLASS's utilities, which FlashInfer's JIT also puts
#                                       on the include path
# scripts/reproduce.sh finds .flashinfer/include by itself, CMake the rest beside it. For a GPU
# machine without internet, run this where pip works and copy .flashinfer/ over.
#
#   bash scripts/get_flashinfer_headers.sh [VERSION]      (default: the newest on PyPI)
#   bash scripts/get_flashinfer_headers.sh FILE.whl       (a flashinfer_python wheel already here)
#
# Exit code: 0, or 1 (one line saying what failed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PY=${PA_PYTHON:-python3}
if [[ "${1:-}" == *.whl ]]; then
    wheel=$1
    [ -f "$wheel" ] || { echo "no such wheel: $wheel" >&2; exit 1; }
else
    spec="flashinfer-python${1:+==$1}"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "downloading $spec (the wheel alone, about 60 MB)"
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$spec" ||
        { echo "pip could not download $spec: check the network, or pip install flashinfer-python and pass --flashinfer to scripts/reproduce.sh" >&2; exit 1; }
    wheel=$(find "$tmp" -maxdepth 1 -name "flashinfer_python-*.whl" | head -n1)
    [ -n "$wheel" ] || { echo "no flashinfer_python wheel in what pip downloaded" >&2; exit 1; }
fi
"$PY" - "$wheel" <<'EOF'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], ".flashinfer"
parts = {"flashinfer/data/include/": "include/", "flashinfer/data/cccl/libcudacxx/include/": "cccl/libcudacxx/include/",
         "flashinfer/data/cutlass/include/": "cutlass/include/",
         "flashinfer/data/cutlass/tools/util/include/": "cutlass/tools/util/include/"}
shutil.rmtree(dest, ignore_errors=True)
n = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        for src, dst in parts.items():
            if name.startswith(src) and not name.endswith("/"):
                out = os.path.join(dest, dst, name[len(src):])
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with z.open(name) as f, open(out, "wb") as g:
                    shutil.copyfileobj(f, g)
                n += 1
if not os.path.isfile(os.path.join(dest, "include", "flashinfer", "attention", "decode.cuh")):
    sys.exit(f"{os.path.basename(wheel)} has no flashinfer/data/include/flashinfer/attention/decode.cuh")
have_cutlass = os.path.isfile(os.path.join(dest, "cutlass", "include", "cute", "tensor.hpp"))
print(f"unpacked {n} files of {os.path.basename(wheel)} into {dest}/ (include/, cccl/libcudacxx/include/"
      + (", cutlass/include/, cutlass/tools/util/include/)" if have_cutlass else "; no CUTLASS in this wheel: the sm_90a prefill row is not built)"))
EOF
