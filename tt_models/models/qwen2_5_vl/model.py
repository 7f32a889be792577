"""One replica of Qwen2.5-VL: the vision tower and the text decoder."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tt_models.models.qwen2_5_vl.text import Qwen2_5_VLText
from tt_models.models.qwen2_5_vl.vision import VisionArgs, VisionTower
from tt_models.runtime import ttnn
from tt_models.tt.model_config import Precision, default_profile


class Qwen2_5_VLModel:
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        self.device = device
        self.vision_args = VisionArgs.from_hf(hf_config.vision_config)
        # The vision tower as Mllama's: every weight bfloat16 ("accuracy") or bfloat8_b ("performance").
        vision_precision = Precision.uniform(optimizations or default_profile(hf_config))
        self.vision = VisionTower(self.vision_args, state, "model.visual.", device, vision_precision)
        self.text = Qwen2_5_VLText(hf_config, state, device, max_batch_size=max_batch_size, max_seq_len=max_seq_len,
                                   optimizations=optimizations)
        self.n_layers = self.text.n_layers
        self.precision = self.text.precision

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size

    @property
    def kv_geometry(self) -> tuple[int, int]:
        return self.text.kv_geometry

    def image_table(self, pixel_values: Sequence[torch.Tensor], grids: Sequence[tuple[int, int, int]]) -> Any:
        """The tokens of a request's images, one after the other: ``[1, 1, image tokens, dim]`` on the device."""
        parts = [self.vision.forward(p, g) for p, g in zip(pixel_values, grids)]
        if len(parts) == 1:
            return parts[0]
        table = ttnn.concat(parts, dim=2)
        for part in parts:
            ttnn.deallocate(part)
        return table
