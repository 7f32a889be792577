"""tt-models: transformer models in TT-NN behind the TT vLLM contract, with paged self- and cross-attention."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# The offline-inference API, imported on first use: ``import tt_models`` (TT vLLM's plugin hook) stays light.
_API = {
    "LLM": "tt_models.speech.llm",  # the engine's LLM with transcribe (speech builds on the engine)
    "LLMEngine": "tt_models.engine.llm_engine",
    "SamplingParams": "tt_models.engine.sampling",
    "RequestOutputKind": "tt_models.engine.sampling",
    "StructuredOutputsParams": "tt_models.engine.structured_output",
    "RequestOutput": "tt_models.engine.outputs",
    "CompletionOutput": "tt_models.engine.outputs",
    "TextPrompt": "tt_models.engine.prompts",
    "TokensPrompt": "tt_models.engine.prompts",
    "ExplicitEncoderDecoderPrompt": "tt_models.engine.prompts",
    "detect_language": "tt_models.speech",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'tt_models' has no attribute {name!r}")
