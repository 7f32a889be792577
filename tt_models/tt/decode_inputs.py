"""Host-side inputs of a device forward: what a captured trace reads from its persistent device tensors.

A decode step's inputs (tokens, positions, page tables, rotary cos/sin, cross tables, masks, sampling
parameters) are built on the host as ttnn host tensors, each with the memory config its device tensor lives
in. Eager decode moves them to the device; traced decode copies them into the tensors the trace captured
(``copy_host_to_device_tensor``), so the same device code runs both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from tt_models.runtime import ttnn
from tt_models.tt.weights import mesh_mapper


@dataclass(frozen=True)
class HostInput:
    tensor: Any  # a ttnn host tensor
    memory_config: Any
    # Of a tracked input (:func:`tracked_ints`) only: the values ``tensor`` holds (those the results depend on), which
    # a traced step compares with those its capture holds, skipping an equal input's copy; and what one step does to
    # them on the device.
    values: torch.Tensor | None = None
    advance: Callable[[torch.Tensor], torch.Tensor] | None = None

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


def tracked_ints(values: torch.Tensor, device: Any, dtype: Any = None, *,
                 advance: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 compared: torch.Tensor | None = None) -> HostInput:
    """Indices as :func:`host_ints` whose device values a trace keeps track of, so that it copies them only when they
    changed: page tables (self or cross), which the device only reads and which change only when a row crosses a
    block boundary or the batch's layout changes; and positions a step advances on the device itself (``advance``:
    what the step does to them, ``ttnn.plus_one``'s effect), which the next step's host values equal unless the
    batch changed. ``compared``: what of ``values`` the results depend on, when not all of them (``-1`` in rows
    whose results are discarded)."""
    values = values.to(torch.int32).contiguous()
    compared = values if compared is None else compared.to(torch.int32)
    # A copy: the runner may refill its table in place.
    return replace(host_ints(values, device, dtype), values=compared.clone(), advance=advance)


def advanced_positions(positions: torch.Tensor) -> torch.Tensor:
    """``ttnn.plus_one(positions, skip_negative_entries=True)``: padding rows (``-1``) stay."""
    return torch.where(positions >= 0, positions + 1, positions)


def to_device(inputs: HostInputs, device: Any) -> dict[str, Any]:
    """The inputs as fresh device tensors (the eager path)."""
    return {name: ttnn.to_device(i.tensor, device, memory_config=i.memory_config) for name, i in inputs.items()}
