"""The two names vLLM 0.25.1's Pixtral module imports from transformers that transformers 5.25 no longer has
(``PixtralRotaryEmbedding``, renamed ``PixtralVisionRotaryEmbedding`` with another signature, and
``position_ids_in_meshgrid``, folded into ``PixtralVisionModel.forward``). Without them vLLM's Mistral 3 module does
not import: neither its processor, which the TT class is registered with, nor vLLM's inspection of its own Mistral 3
class (a subprocess every engine start runs for the checkpoint's plain architecture). Both names serve only vLLM's
own torch vision tower, which the TT class never builds; here they are stand-ins that say so if anything calls them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, NoReturn, Sequence

MISSING = ("PixtralRotaryEmbedding", "position_ids_in_meshgrid")
VLLM_PIXTRAL = "vllm.model_executor.models.pixtral"


def _stand_in(name: str) -> Any:
    def unavailable(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"transformers' Pixtral module has no {name}: vLLM's torch Pixtral tower does not "
                                  "run with this transformers (tt-models' Mistral 3 runs its own)")
    unavailable.__name__ = name
    return unavailable


def provide_pixtral_names() -> None:
    """Put a stand-in for each missing name into transformers' Pixtral module (names it has are left alone)."""
    import transformers.models.pixtral.modeling_pixtral as hf_pixtral

    for name in MISSING:
        if not hasattr(hf_pixtral, name):
            setattr(hf_pixtral, name, _stand_in(name))


class _BeforeVllmPixtral(importlib.abc.MetaPathFinder):
    """Provides the names when vLLM's Pixtral module is first imported, and finds nothing itself."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == VLLM_PIXTRAL:
            provide_pixtral_names()
        return None


def provide_pixtral_names_on_import() -> None:
    """Provide the names just before vLLM's Pixtral module imports (cheap: transformers' Pixtral module is imported
    only then, so vLLM's plugin hook can call this in every process). Idempotent."""
    if not any(isinstance(finder, _BeforeVllmPixtral) for finder in sys.meta_path):
        sys.meta_path.insert(0, _BeforeVllmPixtral())
