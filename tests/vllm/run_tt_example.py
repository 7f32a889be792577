"""Run one of the vendored TT vLLM plugin's example scripts as its users do: ``python run_tt_example.py EXAMPLE.py
ARGS...``.

The one thing done first: ``offline_inference_tt.py`` imports ``TokensPrompt`` from ``vllm.inputs.data``, a module
of an older vLLM layout; vLLM 0.25.1 exports it from ``vllm.inputs``, so that module stands in for the old one.
"""

import runpy
import sys

import vllm.inputs

sys.modules.setdefault("vllm.inputs.data", vllm.inputs)

if __name__ == "__main__":
    example = sys.argv[1]
    sys.argv = [example, *sys.argv[2:]]
    runpy.run_path(example, run_name="__main__")
