"""Host-side inputs of a device forward: what a captured trace reads from its persistent device tensors.

A decode step's inputs (tokens, positions, page tables, rotary cos/sin, cross tables, masks, sampling
parameters) are built on the host as ttnn host tensors, each with the memory config its device tensor lives
in. Eager decode moves them to the device; traced decode copies them into the tensors the trace captured
(``copy_host_to_device_tensor``), so the same device code runs both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.weights import mesh_mapper


@dataclass(frozen=True)
class HostInput:
    tensor: Any  # a ttnn host tensor
    memory_config: Any

    @property
    def signature(self) -> tuple:
        """What a captured trace's input must keep: shape, dtype and layout."""
        return tuple(self.tensor.shape), self.tensor.dtype, self.tensor.layout


HostInputs = dict[str, HostInput]


def host_tensor(values: torch.Tensor, device: Any, *, dtype: Any = None, layout: Any = None,
                memory_config: Any = None) -> HostInput:
    """A float input (TILE and bfloat16 unless told), replicated over a mesh once on the device."""
    tensor = ttnn.from_torch(values, dtype=dtype or ttnn.bfloat16, layout=layout or ttnn.TILE_LAYOUT,
                             mesh_mapper=mesh_mapper(device))
    return HostInput(tensor, memory_config or ttnn.DRAM_MEMORY_CONFIG)


def host_ints(values: torch.Tensor, device: Any, dtype: Any = None) -> HostInput:
    """Indices (positions, page tables, token ids) as a ROW_MAJOR int32 (or ``dtype``) input."""
    tensor = ttnn.from_torch(values.to(torch.int32).contiguous(), dtype=dtype or ttnn.int32,
                             layout=ttnn.ROW_MAJOR_LAYOUT, mesh_mapper=mesh_mapper(device))
    return HostInput(tensor, ttnn.DRAM_MEMORY_CONFIG)


def to_device(inputs: HostInputs, device: Any) -> dict[str, Any]:
    """The inputs as fresh device tensors (the eager path)."""
    return {name: ttnn.to_device(i.tensor, device, memory_config=i.memory_config) for name, i in inputs.items()}
