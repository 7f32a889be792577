"""tt-models' generator classes in TT vLLM (vllm-tt-plugin on vLLM 0.25.1).

Two ways in: the ``vllm.general_plugins`` entry point ``tt_models`` (:func:`register_tt_models`, run by
vLLM in every process) or EXTRA_MODELS_DIR bundles (``python -m tt_models.vllm bundle OUT_DIR``).
Importing this package imports neither vLLM nor the models.
"""

from tt_models.vllm.interface import VllmModelInterface
from tt_models.vllm.registry import register_tt_models

__all__ = ["VllmModelInterface", "register_tt_models"]
