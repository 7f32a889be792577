"""Host-side inputs of a device forward: what a captured trace reads from its persistent device tensors.

A decode step's inputs (tokens, positions, page tables, rotary cos/sin, cross tables, masks, sampling
parameters) are built on the host as ttnn host tensors (when first needed: a traced step that skips a tracked
input's copy builds none), each with the memory config its device tensor lives in. Eager decode moves them to the
device; traced decode copies them into the tensors the trace captured (``copy_host_to_device_tensor``), so the same
device code runs both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Callable

import torch

from tt_models.runtime import api_for, ttnn, use
from tt_models.tt.weights import mesh_mapper


@dataclass(frozen=True)
class HostInput:
    build: Callable[[], Any]  # the ttnn host tensor, built when first needed (:attr:`tensor`)
    signature: tuple  # what a captured trace's input must keep: shape, dtype and layout
    memory_config: Any
    # Of a tracked input (:func:`tracked_ints`, :func:`tracked_tensor`) only: the values ``tensor`` holds (those the
    # results depend on), which a traced step compares with those its capture holds, skipping an equal input's copy;
    # and what one step does to them on the device.
    values: torch.Tensor | None = None
    advance: Callable[[torch.Tensor], torch.Tensor] | None = None

    @cached_property
    def tensor(self) -> Any:
        """The ttnn host tensor: built on first use only, as a skipped copy of a tracked input needs none."""
        return self.build()


HostInputs = dict[str, HostInput]


def _host_input(values: torch.Tensor, device: Any, dtype: Any, layout: Any, memory_config: Any) -> HostInput:
    """``values`` as an input of ``dtype`` and ``layout`` (replicated over a mesh once on the device), its host tensor
    built by ``device``'s API whenever it is first needed (the step consumes its inputs before it returns)."""
    def build() -> Any:
        with use(device):
            return ttnn.from_torch(values, dtype=dtype, layout=layout, mesh_mapper=mesh_mapper(device))

    return HostInput(build, (tuple(values.shape), dtype, layout), memory_config)


def host_tensor(values: torch.Tensor, device: Any, *, dtype: Any = None, layout: Any = None,
                memory_config: Any = None) -> HostInput:
    """A float input (TILE and bfloat16 unless told)."""
    api = api_for(device)
    return _host_input(values, device, dtype or api.bfloat16, layout or api.TILE_LAYOUT,
                       memory_config or api.DRAM_MEMORY_CONFIG)


def host_ints(values: torch.Tensor, device: Any, dtype: Any = None) -> HostInput:
    """Indices (positions, page tables, token ids) as a ROW_MAJOR int32 (or ``dtype``) input."""
    api = api_for(device)
    return _host_input(values.to(torch.int32).contiguous(), device, dtype or api.int32, api.ROW_MAJOR_LAYOUT,
                       api.DRAM_MEMORY_CONFIG)


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


def tracked_tensor(values: torch.Tensor, device: Any, **kwargs: Any) -> HostInput:
    """A float input as :func:`host_tensor` (``kwargs``: its) that a trace copies only when its values changed: per-row
    values that change only with the batch (masks of a row's vision tokens), which the device only reads."""
    return replace(host_tensor(values, device, **kwargs), values=values.clone())


def advanced_positions(positions: torch.Tensor) -> torch.Tensor:
    """``ttnn.plus_one(positions, skip_negative_entries=True)``: padding rows (``-1``) stay."""
    return torch.where(positions >= 0, positions + 1, positions)


def advanced_index(index: torch.Tensor, positions: torch.Tensor, device: Any, dtype: Any = None) -> HostInput:
    """Table rows of the users at ``positions`` (``index``, shaped as ``positions`` or ``[1, B]``: rotary indices,
    learned-position ids) as a tracked input that a decode step advances by one on the device in every row
    (``ttnn.plus_one`` without skipping: padding rows (``positions`` ``-1``) index a valid row too, the table's
    first position's).

    Padding rows are left out of what a trace compares (``-1`` there; their results are discarded), so on the
    device their index grows with the other rows'. It stays inside the table: any change of which rows are padding
    changes what is compared, and the trace copies the index again, resetting them; since then they grew by as many
    steps as every active row, whose positions grew from at least 0, so a padding row's index is at most an active
    row's. Without an active row every row is compared, so each step copies the index anew (an idle data-parallel
    replica's padding rows would otherwise grow without end)."""
    active = positions.reshape(index.shape) >= 0
    compared = torch.where(active, index, -1) if bool(active.any()) else None
    return tracked_ints(index, device, dtype, advance=advanced_positions, compared=compared)


def to_device(inputs: HostInputs, device: Any) -> dict[str, Any]:
    """The inputs as fresh device tensors (the eager path)."""
    return {name: ttnn.to_device(i.tensor, device, memory_config=i.memory_config) for name, i in inputs.items()}
