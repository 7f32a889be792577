"""Placing torch weights on a device as TT-NN tensors."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn


def mesh_mapper(device: Any) -> Any:
    """Replicate over every chip of a mesh (the models hold a full copy per chip)."""
    return ttnn.ReplicateTensorToMesh(device) if device.get_num_devices() > 1 else None


def as_tensor(t: torch.Tensor, device: Any, *, dtype: Any = None, layout: Any = None,
              memory_config: Any = None) -> Any:
    """``ttnn.from_torch`` onto ``device`` (TILE and bfloat16 unless told), replicated over a mesh."""
    return ttnn.from_torch(t, dtype=dtype or ttnn.bfloat16, layout=layout or ttnn.TILE_LAYOUT, device=device,
                           memory_config=memory_config or ttnn.DRAM_MEMORY_CONFIG, mesh_mapper=mesh_mapper(device))


def as_linear_weight(weight: torch.Tensor, device: Any, dtype: Any, memory_config: Any = None) -> Any:
    """An HF ``nn.Linear`` weight ``[out, in]`` as the ``[1, 1, in, out]`` operand of ``ttnn.linear``."""
    return as_tensor(weight.T.contiguous()[None, None], device, dtype=dtype, memory_config=memory_config)


def as_bias(bias: torch.Tensor, device: Any) -> Any:
    return as_tensor(bias.reshape(1, 1, 1, -1), device)


def as_int_tensor(values: torch.Tensor, device: Any) -> Any:
    """Indices (positions, page tables) as an int32 ROW_MAJOR device tensor, as the paged ops take them."""
    return ttnn.from_torch(values.to(torch.int32).contiguous(), dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT,
                           device=device, mesh_mapper=mesh_mapper(device))


def to_host(t: Any, device: Any) -> torch.Tensor:
    """A device tensor's values as torch (the first chip's copy on a mesh)."""
    if device.get_num_devices() > 1:
        out = ttnn.to_torch(t, mesh_composer=ttnn.ConcatMeshToTensor(device, dim=0))
        return out[: t.shape[0]]
    return ttnn.to_torch(t)
