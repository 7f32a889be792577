"""The paged KV pool: per layer, K and V tensors ``[num_blocks, n_kv_heads, block_size, head_dim]``."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tt_models.tt.weights import as_tensor

TILE = 32


def allocate_paged_kv_cache(shape: Sequence[int], num_layers: int, dtype: Any, device: Any) -> list[list[Any]]:
    """Zeroed ``[K, V]`` per layer on ``device`` (replicated over a mesh)."""
    num_blocks, n_kv_heads, block_size, head_dim = shape
    if block_size % TILE or head_dim % TILE:
        raise ValueError(f"KV cache shape {tuple(shape)}: block_size and head_dim must be multiples of {TILE}")
    zeros = torch.zeros(num_blocks, n_kv_heads, block_size, head_dim)
    return [[as_tensor(zeros, device, dtype=dtype), as_tensor(zeros, device, dtype=dtype)] for _ in range(num_layers)]
