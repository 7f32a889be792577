"""One replica of Mistral 3: the Pixtral vision tower, the projector and the text decoder."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from tt_models.models.mistral3.projector import Projector
from tt_models.models.mistral3.text import Mistral3Text
from tt_models.models.mistral3.vision import VisionArgs, VisionTower
from tt_models.runtime import ttnn
from tt_models.tt.image_text import ImageTextModel
from tt_models.tt.model_config import Precision, default_profile


def text_precision(hf_config: Any, optimizations: str | None) -> Precision:
    """The Llama family's profiles with the MLP weights in bfloat8_b in both, as the other image+text models: bfloat4_b
    MLPs take the tiny test model's prefill logits PCC against HF to 0.91-0.98 and decode to 0.954 (bfloat8_b:
    >= 0.9986), host backend."""
    return replace(Precision.for_model(hf_config, optimizations), mlp_weights=ttnn.bfloat8_b)


class Mistral3Model(ImageTextModel):
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        self.device = device
        self.vision_args = VisionArgs.from_hf(hf_config)
        # The vision tower and projector as the other towers: every weight bfloat16 ("accuracy") or bfloat8_b
        # ("performance").
        vision_precision = Precision.uniform(optimizations or default_profile(hf_config))
        self.vision = VisionTower(self.vision_args, state, "model.vision_tower.", device, vision_precision)
        self.projector = Projector(hf_config, state, "model.multi_modal_projector.", device,
                                   vision_precision.attention_weights)
        super().__init__(Mistral3Text(hf_config, state, device, max_batch_size=max_batch_size,
                                      max_seq_len=max_seq_len,
                                      precision=text_precision(hf_config, optimizations)))

    def image_tokens(self, pixel_values: torch.Tensor) -> Any:
        """One image ``[C, h, w]`` -> its ``(h / t) * (w / t)`` tokens ``[1, 1, tokens, text dim]`` on the device
        (``t``: ``patch_size * spatial_merge_size`` pixels), row-major as its ``[IMG]`` tokens are in the prompt."""
        patches, _ = self.vision.forward(pixel_values)
        tokens = self.projector.forward(patches)
        ttnn.deallocate(patches)
        return tokens

    def tokens_of(self, pixel_values: torch.Tensor) -> int:
        """How many ``[IMG]`` tokens an image ``[C, h, w]`` has in the prompt."""
        side = self.vision_args.token_size
        return (pixel_values.shape[-2] // side) * (pixel_values.shape[-1] // side)

    def blank_image(self) -> tuple[torch.Tensor]:
        """The smallest image: one token."""
        args = self.vision_args
        return (torch.zeros(args.channels, args.token_size, args.token_size),)
