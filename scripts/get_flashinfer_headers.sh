#!/usr/bin/env bash
# Fetches FlashInfer's headers for the FlashInfer peer (peers/flashinfer) without installing
# FlashInfer: downloads the flashinfer-python wheel (no dependencies) with pip and unpacks, into
# .flashinfer/ (git-ignored, never committed), the two folders the peer compiles against:
#   .flashinfer/include                 FlashInfer's headers (the wheel's flashinfer/data/include)
#   .flashinfer/cccl/libcudacxx/include the CCCL they need (newer than CUDA 13.0's own)
# scripts/reproduce.sh finds .flashinfer/include by itself. For a GPU machine without internet,
# run this where pip works and copy .flashinfer/ over.
#
#   bash scripts/get_flashinfer_headers.sh [VERSION]      (default: the newest on PyPI)
#
# Exit code: 0, or 1 (one line saying what failed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
spec="flashinfer-python${1:+==$1}"
PY=${PA_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading $spec (the wheel alone, about 60 MB)"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$spec" ||
    { echo "pip could not download $spec: check the network, or pip install flashinfer-python and pass --flashinfer to scripts/reproduce.sh" >&2; exit 1; }
wheel=$(find "$tmp" -maxdepth 1 -name "flashinfer_python-*.whl" | head -n1)
[ -n "$wheel" ] || { echo "no flashinfer_python wheel in what pip downloaded" >&2; exit 1; }
"$PY" - "$wheel" <<'EOF'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], ".flashinfer"
parts = {"flashinfer/data/include/": "include/", "flashinfer/data/cccl/libcudacxx/include/": "cccl/libcudacxx/include/"}
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
print(f"unpacked {n} files of {os.path.basename(wheel)} into {dest}/ (include/, cccl/libcudacxx/include/)")
EOF
