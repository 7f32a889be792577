"""One replica of Gemma 3: the SigLIP vision tower, the projector and the text decoder."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from tt_models.models.gemma3.projector import Projector
from tt_models.models.gemma3.text import Gemma3Text
from tt_models.models.gemma3.vision import VisionArgs, VisionTower
from tt_models.runtime import ttnn
from tt_models.tt.image_text import ImageTextModel
from tt_models.tt.model_config import Precision, default_profile


def text_precision(hf_config: Any, optimizations: str | None) -> Precision:
    """The Llama family's profiles with the MLP weights in bfloat8_b in both, as the other image+text models."""
    return replace(Precision.for_model(hf_config, optimizations), mlp_weights=ttnn.bfloat8_b)


class Gemma3Model(ImageTextModel):
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        self.device = device
        self.vision_args = args = VisionArgs.from_hf(hf_config.vision_config)
        # The vision tower and projector as Mllama's: every weight bfloat16 ("accuracy") or bfloat8_b ("performance").
        vision_precision = Precision.uniform(optimizations or default_profile(hf_config))
        self.vision = VisionTower(args, state, "model.vision_tower.", device, vision_precision)
        self.tokens_per_image = hf_config.mm_tokens_per_image
        self.projector = Projector(state, "model.multi_modal_projector.", args.patches_per_side, self.tokens_per_image,
                                   args.norm_eps, device, vision_precision.attention_weights)
        super().__init__(Gemma3Text(hf_config.text_config, state, device, max_batch_size=max_batch_size,
                                    max_seq_len=max_seq_len, precision=text_precision(hf_config, optimizations)))

    def image_tokens(self, pixel_values: torch.Tensor) -> Any:
        """One image ``[C, H, W]`` -> its tokens ``[1, 1, mm_tokens_per_image, text dim]`` on the device."""
        patches = self.vision.forward(pixel_values)
        out = self.projector.forward(patches)
        ttnn.deallocate(patches)
        return out

    def blank_image(self) -> tuple[torch.Tensor]:
        args = self.vision_args
        return (torch.zeros(args.channels, args.image_size, args.image_size),)
