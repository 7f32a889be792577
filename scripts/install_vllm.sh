#!/usr/bin/env bash
# Install vLLM 0.25.1 into .venv the way TT installs it under vllm-tt-plugin (research/contract.md
# section 7): built from the PyPI source distribution with VLLM_TARGET_DEVICE=empty and --no-deps, after
# the requirements/common.txt inside that sdist with numpy<2. Needed only for tests/vllm (which skip
# without it) and for serving through TT vLLM. Idempotent: does nothing when that build is installed.
#
# Where this differs from TT's docs/install-vllm-tt.sh, and why:
# - pip --no-build-isolation instead of uv's isolated build: isolation would install vLLM's build
#   requirement torch==2.11.0 (gigabytes of CUDA wheels) just to run setup.py, which compiles nothing
#   for the empty target. The few build tools go into .venv instead (setuptools becomes <81, as vLLM's
#   common.txt requires on Python 3.12 anyway).
# - common.txt comes from the sdist, not from GitHub tag v0.25.1 (the same file; PyPI is what is reachable).
# - torch, transformers, numpy and tokenizers keep their installed versions (a constraints file); TT's
#   overrides rewrite two lines of common.txt: numpy<2 and opencv-python-headless==4.11.0.86 (the last
#   build for numpy 1; common.txt asks >=4.13, so `pip check` reports that line, as it does for TT).
# - CARGO=false skips vLLM's optional Rust extras (the vllm-rs frontend, a tool parser), which TT vLLM
#   does not use, instead of compiling them wherever a Rust toolchain happens to exist.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.25.1
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "install_vllm: $PY not found; run scripts/setup.sh first" >&2; exit 1; }

if "$PY" -c 'import sys; from importlib.metadata import version; sys.exit(version("vllm") != sys.argv[1])' \
     "$VERSION+empty" 2>/dev/null; then
  echo "install_vllm: vllm $VERSION+empty is already installed"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip_install=("$PY" -m pip install --quiet --progress-bar off)
echo "install_vllm: building vllm $VERSION for VLLM_TARGET_DEVICE=empty (about a minute)"
"$PY" -c 'from importlib.metadata import version
for name in ("torch", "transformers", "numpy", "tokenizers"):
    print(f"{name}=={version(name)}")' > "$work/constraints.txt"

# setup.py's imports (pyproject build-system.requires without torch, which .venv has); then the sdist.
"${pip_install[@]}" -c "$work/constraints.txt" "setuptools>=77.0.3,<81" "setuptools-scm>=8" \
  "setuptools-rust>=1.9.0" "packaging>=24.2" wheel jinja2
"$PY" -m pip download --quiet --no-deps --no-binary vllm --no-build-isolation -d "$work" "vllm==$VERSION"

sdist="$work/vllm-$VERSION.tar.gz"
tar -xzf "$sdist" -C "$work" "vllm-$VERSION/requirements/common.txt"
sed -e 's/^numpy\b.*/numpy<2/' -e 's/^opencv-python-headless\b.*/opencv-python-headless==4.11.0.86/' \
  "$work/vllm-$VERSION/requirements/common.txt" > "$work/common.txt"
"${pip_install[@]}" -c "$work/constraints.txt" -r "$work/common.txt"

VLLM_TARGET_DEVICE=empty CARGO=false "${pip_install[@]}" --no-deps --no-build-isolation "$sdist"
"$PY" -c 'from importlib.metadata import version; print("install_vllm: installed vllm", version("vllm"))'
