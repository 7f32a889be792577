"""What vLLM's ModelRegistry inspection needs to see in a TT generator class.

vLLM 0.25.1 classifies a registered class by its shape (``_ModelInfo.from_model_cls``, run in a
subprocess for lazily registered classes): it is a text-generation model only if ``__init__`` accepts
``vllm_config`` and the class has ``embed_input_ids``, ``forward(input_ids, positions)`` and
``compute_logits``. A class that fails this still loads under its ``TT`` name, but where it is registered
under the plain HF name (an architecture vLLM does not know), ``ModelConfig`` rejects it with "This model
does not support `--runner generate`". TT vLLM never calls these members (its runner drives
``prefill_forward``/``decode_forward``), so here they only refuse, naming the TT entry points.

vLLM does treat the loaded model as an ``nn.Module`` in one place TT vLLM reaches: an in-process
``LLMEngine`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) walks ``model.modules()`` when it is finalized, to
clean up torch.compile wrappers (``LLMEngine._cleanup_instance_caches``). A TT generator holds no torch
modules, so ``modules()`` yields none.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any, Callable

_REFUSAL = ("{cls} runs under TT vLLM, which builds it with initialize_vllm_model() and drives "
            "prefill_forward()/decode_forward(); vLLM's GPU model interface ({member}) is not implemented")


class VllmModelInterface:
    """Base class giving a TT generator class the members vLLM's registry inspection looks for.

    Deriving from it is the whole change: a subclass ``__init__`` that does not accept ``vllm_config``
    is wrapped to accept it as a keyword and refuse it, so the class keeps its own constructor.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and "vllm_config" not in inspect.signature(init).parameters:
            cls.__init__ = _refusing_vllm_config(init)

    def modules(self) -> Iterator[Any]:
        """No torch modules: what vLLM's engine cleanup walks looking for torch.compile wrappers."""
        return iter(())

    def embed_input_ids(self, input_ids: Any) -> Any:
        raise NotImplementedError(_REFUSAL.format(cls=type(self).__name__, member="embed_input_ids"))

    def forward(self, input_ids: Any, positions: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(_REFUSAL.format(cls=type(self).__name__, member="forward"))

    def compute_logits(self, hidden_states: Any) -> Any:
        raise NotImplementedError(_REFUSAL.format(cls=type(self).__name__, member="compute_logits"))


def _refusing_vllm_config(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` with a keyword-only ``vllm_config`` that vLLM's inspection sees and a caller may not pass
    (not ``functools.wraps``: its ``__wrapped__`` would make ``inspect.signature`` report ``init``'s)."""

    def __init__(self: Any, *args: Any, vllm_config: Any = None, **kwargs: Any) -> None:
        if vllm_config is not None:
            raise TypeError(_REFUSAL.format(cls=type(self).__name__, member="__init__(vllm_config=...)"))
        init(self, *args, **kwargs)

    __init__.__module__, __init__.__qualname__, __init__.__doc__ = init.__module__, init.__qualname__, init.__doc__
    return __init__
