"""One replica of Gemma 3: the SigLIP vision tower, the projector and the text decoder."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import torch

from tt_models.models.gemma3.projector import Projector
from tt_models.models.gemma3.text import Gemma3Text, language_model_state
from tt_models.models.gemma3.vision import VisionArgs, VisionTower
from tt_models.runtime import ttnn
from tt_models.tt.image_text import ImageTextModel, concat_tokens
from tt_models.tt.model_config import Precision, default_profile

# Patch rows per vision forward: tt-metal's Gemma 3 runs at most 3 images of 896 px (4096 patches each) per forward
# ("Device runs OOM with batch size > 3", models/demos/gemma3/tt/gemma_e2e_model.py); smaller towers batch more
# images in the same rows.
MAX_PATCHES_PER_FORWARD = 3 * 4096


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
        text_state = language_model_state(state)
        super().__init__(Gemma3Text(hf_config.text_config, text_state, device, max_batch_size=max_batch_size,
                                    max_seq_len=max_seq_len, precision=text_precision(hf_config, optimizations)))

    def image_tokens(self, pixel_values: torch.Tensor) -> Any:
        """One image ``[C, H, W]`` -> its tokens ``[1, 1, mm_tokens_per_image, text dim]`` on the device."""
        return self._encode(pixel_values[None])

    def image_table(self, pixel_values: Sequence[torch.Tensor]) -> Any:
        """A prompt's images ``[C, H, W]`` (pan-and-scan crops are images too) -> their tokens one after the other
        ``[1, 1, images * mm_tokens_per_image, text dim]``. Every image has the tower's one size, so they go through
        it as one batch, in chunks of at most ``MAX_PATCHES_PER_FORWARD`` patch rows."""
        images = torch.stack(list(pixel_values))
        step = max(1, MAX_PATCHES_PER_FORWARD // self.vision_args.patches_per_side ** 2)
        return concat_tokens([self._encode(images[i:i + step]) for i in range(0, len(images), step)])

    def _encode(self, images: torch.Tensor) -> Any:
        """``[B, C, H, W]`` -> the images' tokens one after the other ``[1, 1, B * mm_tokens_per_image, text dim]``."""
        patches = self.vision.forward(images)
        tokens = self.projector.forward(patches)
        ttnn.deallocate(patches)
        return ttnn.reshape(tokens, (1, 1, len(images) * self.tokens_per_image, tokens.shape[-1]))

    def blank_image(self) -> tuple[torch.Tensor]:
        args = self.vision_args
        return (torch.zeros(args.channels, args.image_size, args.image_size),)
