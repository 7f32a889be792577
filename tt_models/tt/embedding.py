"""Token embedding lookup on the device. On a mesh the table is split by hidden columns, so the embeddings come out
fractured, as the residual stream they start (:mod:`tt_models.tt.tensor_parallel`)."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_inputs import HostInput, host_ints
from tt_models.tt.weights import as_tensor, mesh_mapper


class Embedding:
    def __init__(self, weight: torch.Tensor, device: Any) -> None:
        self.device = device
        self.weight = as_tensor(weight, device, layout=ttnn.ROW_MAJOR_LAYOUT, shard_dim=-1)

    def forward(self, tokens: torch.Tensor) -> Any:
        """Token ids ``[S]`` -> embeddings ``[1, 1, S, dim]`` (TILE, bfloat16)."""
        ids = ttnn.from_torch(tokens.reshape(1, -1).to(torch.int32), dtype=ttnn.uint32, device=self.device,
                              layout=ttnn.ROW_MAJOR_LAYOUT, mesh_mapper=mesh_mapper(self.device))
        x = self.forward_ids(ids)
        ttnn.deallocate(ids)
        return x

    def forward_ids(self, ids: Any) -> Any:
        """Device token ids (UINT32 ROW_MAJOR ``[1, S]``) -> embeddings ``[1, 1, S, dim]``."""
        x = ttnn.embedding(ids, self.weight, layout=ttnn.TILE_LAYOUT, dtype=ttnn.bfloat16)
        return ttnn.reshape(x, (1, 1, ids.shape[-1], x.shape[-1]))

    @staticmethod
    def host_ids(tokens: torch.Tensor, device: Any) -> HostInput:
        """Token ids ``[S]`` as the host input of :meth:`forward_ids`."""
        return host_ints(tokens.reshape(1, -1), device, ttnn.uint32)
