"""Token embedding lookup on the device."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.weights import as_tensor, mesh_mapper


class Embedding:
    def __init__(self, weight: torch.Tensor, device: Any) -> None:
        self.device = device
        self.weight = as_tensor(weight, device, layout=ttnn.ROW_MAJOR_LAYOUT)

    def forward(self, tokens: torch.Tensor) -> Any:
        """Token ids ``[S]`` -> embeddings ``[1, 1, S, dim]`` (TILE, bfloat16)."""
        ids = ttnn.from_torch(tokens.reshape(1, -1).to(torch.int32), dtype=ttnn.uint32, device=self.device,
                              layout=ttnn.ROW_MAJOR_LAYOUT, mesh_mapper=mesh_mapper(self.device))
        x = ttnn.embedding(ids, self.weight, layout=ttnn.TILE_LAYOUT, dtype=ttnn.bfloat16)
        ttnn.deallocate(ids)
        return ttnn.reshape(x, (1, 1, tokens.numel(), x.shape[-1]))
