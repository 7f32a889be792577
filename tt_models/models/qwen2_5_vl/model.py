"""One replica of Qwen2.5-VL: the vision tower and the text decoder."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.qwen2_5_vl.text import Qwen2_5_VLText
from tt_models.models.qwen2_5_vl.vision import VisionArgs, VisionTower
from tt_models.tt.image_text import ImageTextModel
from tt_models.tt.model_config import Precision, default_profile


class Qwen2_5_VLModel(ImageTextModel):
    # The family's parts, built from the config as these are (Qwen3-VL's replica swaps in its own).
    vision_args_class, tower_class, text_class = VisionArgs, VisionTower, Qwen2_5_VLText

    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        self.device = device
        self.vision_args = self.vision_args_class.from_hf(hf_config.vision_config)
        # The vision tower as Mllama's: every weight bfloat16 ("accuracy") or bfloat8_b ("performance").
        vision_precision = Precision.uniform(optimizations or default_profile(hf_config))
        self.vision = self.tower_class(self.vision_args, state, "model.visual.", device, vision_precision)
        super().__init__(self.text_class(hf_config, state, device, max_batch_size=max_batch_size,
                                         max_seq_len=max_seq_len, optimizations=optimizations))

    def image_tokens(self, pixel_values: torch.Tensor, grid: tuple[int, int, int]) -> Any:
        """One image's patches ``[t * h * w, C * T * p * p]`` and ``(t, h, w)`` grid -> its tokens
        ``[1, 1, t * h * w / merge**2, text dim]`` on the device."""
        return self.vision.forward(pixel_values, grid)

    def blank_image(self) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """The smallest image: one merge unit."""
        args = self.vision_args
        return torch.zeros(args.merge ** 2, args.patch_width), (1, args.merge, args.merge)
