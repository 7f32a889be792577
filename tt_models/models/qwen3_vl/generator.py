"""The TT vLLM generator class of Qwen3-VL, driven as TT vLLM's plugin (b95c050) drives an M-RoPE model: Qwen2.5-VL's
contract (:mod:`tt_models.models.qwen2_5_vl.generator`: ``pixel_values`` and ``image_grid_thw`` per prefill row,
rope deltas returned from prefill and kept per slot for decode) over Qwen3-VL's replica."""

from __future__ import annotations

from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.models.qwen3_vl.model import Qwen3VLModel


class Qwen3VLForConditionalGeneration(Qwen2_5_VLForConditionalGeneration):
    """Qwen3-VL: images + text in, text out; image tokens in the prompt, DeepStack, interleaved M-RoPE positions."""

    model_class = Qwen3VLModel
    models: list[Qwen3VLModel]
