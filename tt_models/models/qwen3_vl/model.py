"""One replica of Qwen3-VL: Qwen2.5-VL's replica (:mod:`tt_models.models.qwen2_5_vl.model`) on Qwen3-VL's vision tower
(with its DeepStack mergers) and text decoder."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.qwen2_5_vl.model import Qwen2_5_VLModel
from tt_models.models.qwen3_vl.text import Qwen3VLText
from tt_models.models.qwen3_vl.vision import VisionArgs, VisionTower
from tt_models.tt.image_text import concat_tokens


class Qwen3VLModel(Qwen2_5_VLModel):
    vision_args_class, tower_class, text_class = VisionArgs, VisionTower, Qwen3VLText

    def image_tokens(self, pixel_values: torch.Tensor, grid: tuple[int, int, int]) -> Any:
        """One image's patches ``[t * h * w, C * T * p * p]`` and ``(t, h, w)`` grid -> its tokens and DeepStack
        features side by side, ``[1, 1, t * h * w / merge**2, (1 + DeepStack layers) * text dim]`` on the device (one
        table carries both through the image+text plumbing; the text decoder splits it)."""
        return concat_tokens(self.vision.forward(pixel_values, grid), dim=3)
