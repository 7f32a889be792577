"""tt-models' generator classes in TT vLLM (vllm-tt-plugin on vLLM 0.25.1).

Two ways in: the ``vllm.general_plugins`` entry point ``tt_models`` (:func:`general_plugin`, run by vLLM in
every process) or EXTRA_MODELS_DIR bundles (``python -m tt_models.vllm bundle OUT_DIR``).
Importing this package imports neither vLLM nor the models.
"""

from tt_models.vllm.host_device import use_host_device_if_requested
from tt_models.vllm.interface import VllmModelInterface
from tt_models.vllm.registry import register_tt_models

__all__ = ["ENCODER_DECODER_WORKER", "VllmModelInterface", "general_plugin", "register_tt_models",
           "use_host_device_if_requested"]

# ``vllm serve --worker-cls`` for tt-models' encoder-decoder classes (the module imports vLLM and the plugin).
ENCODER_DECODER_WORKER = "tt_models.vllm.encoder_decoder_worker.TTEncoderDecoderWorker"


def general_plugin() -> None:
    """The ``vllm.general_plugins`` hook: register the generator classes and, with ``TT_MODELS_BACKEND=host``,
    make vllm-tt-plugin's worker open a host device instead of a TT mesh."""
    register_tt_models()
    use_host_device_if_requested()
