"""Final projection to vocabulary logits."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.paged_inputs import TILE, PrefillChunk
from tt_models.tt.weights import as_bias, as_linear_weight, to_host


class LMHead:
    def __init__(self, weight: torch.Tensor, device: Any, weight_dtype: Any, bias: torch.Tensor | None = None) -> None:
        self.weight = as_linear_weight(weight, device, weight_dtype)
        self.bias = None if bias is None else as_bias(bias, device)

    def forward(self, x: Any) -> Any:
        return ttnn.linear(x, self.weight, bias=self.bias, dtype=ttnn.float32)


def last_token_logits(x: Any, chunk: PrefillChunk, norm: Any | None, lm_head: LMHead, device: Any,
                      on_device: bool = False) -> Any:
    """Logits of a prefill chunk's last position: the final norm (if any) and LM head run on the one tile
    holding it. Host ``[V]``, or with ``on_device`` the device row ``[1, 1, 1, V]`` (for device sampling)."""
    last = chunk.end - 1 - chunk.start
    tile = last // TILE * TILE
    if norm is not None:
        x = norm.forward(x)
    x = ttnn.slice(x, (0, 0, tile, 0), (1, 1, tile + TILE, x.shape[-1]))
    logits = lm_head.forward(x)
    if on_device:
        row = last - tile
        return ttnn.slice(logits, (0, 0, row, 0), (1, 1, row + 1, logits.shape[-1]))
    return to_host(logits, device)[0, 0, last - tile].float()
