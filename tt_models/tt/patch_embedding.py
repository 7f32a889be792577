"""The patch embedding of the vision towers: a Conv with stride = kernel (Conv2d over ``p x p``, Qwen's Conv3d over
``T x p x p``) as one matmul over the flat patches cut on the host, each in the conv weight's own order. The patch
width is zero-padded to whole tiles (the padded columns meet zero weight rows). On a mesh the matmul is
column-parallel: the states come out fractured, as the residual stream runs."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.linear import Linear
from tt_models.tt.rope import TILE
from tt_models.tt.weights import as_tensor


class PatchEmbedding:
    def __init__(self, conv_weight: torch.Tensor, device: Any, dtype: Any, *, bias: torch.Tensor | None = None) -> None:
        """``conv_weight [dim, C, ..., p, p]``, ``bias [dim]`` (where the conv has one)."""
        conv = conv_weight.reshape(conv_weight.shape[0], -1)
        self.device = device
        self.width = conv.shape[1]
        self.padded_width = -(-self.width // TILE) * TILE
        self.linear = Linear(torch.nn.functional.pad(conv, (0, self.padded_width - self.width)), device, dtype,
                             bias=bias, parallel="column")

    def forward(self, patches: torch.Tensor) -> Any:
        """Flat patches ``[B, 1, patches, width]`` on the host -> their states ``[B, 1, patches, dim]`` on the device
        (fractured over a mesh)."""
        rows = as_tensor(torch.nn.functional.pad(patches, (0, self.padded_width - self.width)), self.device)
        out = self.linear.forward(rows)
        ttnn.deallocate(rows)
        return out
