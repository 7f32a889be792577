"""One replica of Qwen3-VL: the vision tower (with its DeepStack mergers) and the text decoder."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.qwen3_vl.text import Qwen3VLText
from tt_models.models.qwen3_vl.vision import VisionArgs, VisionTower
from tt_models.runtime import ttnn
from tt_models.tt.image_text import ImageTextModel
from tt_models.tt.model_config import Precision, default_profile


class Qwen3VLModel(ImageTextModel):
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        self.device = device
        self.vision_args = VisionArgs.from_hf(hf_config.vision_config)
        # The vision tower as the other towers: every weight bfloat16 ("accuracy") or bfloat8_b ("performance").
        vision_precision = Precision.uniform(optimizations or default_profile(hf_config))
        self.vision = VisionTower(self.vision_args, state, "model.visual.", device, vision_precision)
        super().__init__(Qwen3VLText(hf_config, state, device, max_batch_size=max_batch_size,
                                     max_seq_len=max_seq_len, optimizations=optimizations))

    def image_tokens(self, pixel_values: torch.Tensor, grid: tuple[int, int, int]) -> Any:
        """One image's patches ``[t * h * w, C * T * p * p]`` and ``(t, h, w)`` grid -> its tokens and DeepStack
        features side by side, ``[1, 1, t * h * w / merge**2, (1 + DeepStack layers) * text dim]`` on the device (one
        table carries both through the image+text plumbing; the text decoder splits it)."""
        parts = self.vision.forward(pixel_values, grid)
        if len(parts) == 1:
            return parts[0]
        out = ttnn.concat(parts, dim=3)
        for part in parts:
            ttnn.deallocate(part)
        return out

    def blank_image(self) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """The smallest image: one merge unit."""
        args = self.vision_args
        return torch.zeros(args.merge ** 2, args.patch_width), (1, args.merge, args.merge)
