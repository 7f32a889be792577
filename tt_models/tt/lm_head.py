"""Final projection to vocabulary logits."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.weights import as_linear_weight


class LMHead:
    def __init__(self, weight: torch.Tensor, device: Any, weight_dtype: Any) -> None:
        self.weight = as_linear_weight(weight, device, weight_dtype)

    def forward(self, x: Any) -> Any:
        return ttnn.linear(x, self.weight, dtype=ttnn.float32)
