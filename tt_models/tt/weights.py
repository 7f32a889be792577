"""Placing torch weights on a device as TT-NN tensors: replicated over a mesh, or split over its chips."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn


def mesh_mapper(device: Any, shard_dim: int | None = None) -> Any:
    """Replicate over every chip of a mesh, or give chip ``c`` the ``c``-th equal slice along ``shard_dim``."""
    if device.get_num_devices() == 1:
        return None
    if shard_dim is None:
        return ttnn.ReplicateTensorToMesh(device)
    return ttnn.ShardTensorToMesh(device, dim=shard_dim)


def as_tensor(t: torch.Tensor, device: Any, *, dtype: Any = None, layout: Any = None, memory_config: Any = None,
              shard_dim: int | None = None) -> Any:
    """``ttnn.from_torch`` onto ``device`` (TILE and bfloat16 unless told), replicated over a mesh or split along
    ``shard_dim``."""
    return ttnn.from_torch(t, dtype=dtype or ttnn.bfloat16, layout=layout or ttnn.TILE_LAYOUT, device=device,
                           memory_config=memory_config or ttnn.DRAM_MEMORY_CONFIG,
                           mesh_mapper=mesh_mapper(device, shard_dim))


def as_linear_weight(weight: torch.Tensor, device: Any, dtype: Any, memory_config: Any = None,
                     shard_dim: int | None = None) -> Any:
    """An HF ``nn.Linear`` weight ``[out, in]`` as the ``[1, 1, in, out]`` operand of ``ttnn.linear`` (split over a
    mesh along ``shard_dim``: -1 by output columns, -2 by input rows)."""
    return as_tensor(weight.T.contiguous()[None, None], device, dtype=dtype, memory_config=memory_config,
                     shard_dim=shard_dim)


def as_bias(bias: torch.Tensor, device: Any, shard_dim: int | None = None) -> Any:
    return as_tensor(bias.reshape(1, 1, 1, -1), device, shard_dim=shard_dim)


def as_int_tensor(values: torch.Tensor, device: Any) -> Any:
    """Indices (positions, page tables) as an int32 ROW_MAJOR device tensor, as the paged ops take them."""
    return ttnn.from_torch(values.to(torch.int32).contiguous(), dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT,
                           device=device, mesh_mapper=mesh_mapper(device))


def to_host(t: Any, device: Any, concat_dim: int | None = None) -> torch.Tensor:
    """A device tensor's values as torch: the first chip's copy of a replicated tensor on a mesh, or the chips'
    slices joined along ``concat_dim``."""
    if device.get_num_devices() == 1:
        return ttnn.to_torch(t)
    if concat_dim is not None:
        return ttnn.to_torch(t, mesh_composer=ttnn.ConcatMeshToTensor(device, dim=concat_dim))
    return ttnn.to_torch(ttnn.get_device_tensors(t)[0])  # one chip's copy: no need to read the others


def logits_to_host(logits: Any, device: Any, vocab_size: int) -> torch.Tensor:
    """LM head logits (split by vocabulary over a mesh, padded) as host ``[..., vocab_size]``."""
    return to_host(logits, device, concat_dim=-1)[..., :vocab_size]
