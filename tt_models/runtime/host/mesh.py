"""Tensors on a mesh of chips: one value per chip, the mesh mappers that place them and the composers that read them.

On a mesh of more than one chip every device tensor is a :class:`MeshTensor`, one host-backend tensor per chip
(row-major over the mesh), as ttnn's multi-device tensors hold one buffer per chip: ``ShardTensorToMesh`` gives
each chip its slice, ``ReplicateTensorToMesh`` (the default) a copy of its own. An op on mesh tensors runs once per
chip on that chip's tensors (:func:`per_chip`, applied to every device op), so in-place ops such as
``paged_update_cache`` write each chip's own buffer; the collectives (``collectives.py``) are the only ops that
read across chips. On a single chip nothing changes: tensors stay plain :class:`Tensor` objects.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch

from .device import MeshDevice
from .errors import TTFatal, check
from .tensor import Tensor
from .types import MeshShape

__all__ = [
    "ReplicateTensorToMesh",
    "ShardTensorToMesh",
    "ShardTensor2dMesh",
    "ConcatMeshToTensor",
    "ConcatMesh2dToTensor",
    "get_device_tensors",
]

_chip = [0]  # the chip whose tensors the running op sees (per-core PRNGs are per chip)


def current_chip() -> int:
    return _chip[0]


@contextmanager
def on_chip(index: int) -> Iterator[None]:
    previous, _chip[0] = _chip[0], index
    try:
        yield
    finally:
        _chip[0] = previous


class MeshTensor:
    """A tensor on (or, before ``to_device``, for) a mesh: ``shards[i]`` is chip ``i``'s tensor. Its shape, dtype,
    layout and memory config are the per-chip ones, as a ttnn multi-device tensor reports them."""

    __slots__ = ("shards", "_device")

    def __init__(self, shards: Sequence[Tensor], device: MeshDevice | None) -> None:
        first = shards[0]
        for shard in shards[1:]:
            check((shard.shape, shard.dtype, shard.layout) == (first.shape, first.dtype, first.layout), "mesh tensor",
                  f"chips hold different tensors: {shard} vs {first}")
        self.shards = list(shards)
        self._device = device

    @property
    def shape(self) -> Any:
        return self.shards[0].shape

    @property
    def padded_shape(self) -> Any:
        return self.shards[0].padded_shape

    @property
    def dtype(self) -> Any:
        return self.shards[0].dtype

    @property
    def layout(self) -> Any:
        return self.shards[0].layout

    def device(self) -> MeshDevice | None:
        return self._device

    def memory_config(self) -> Any:
        return self.shards[0].memory_config()

    def is_sharded(self) -> bool:
        return self.shards[0].is_sharded()

    def storage_type(self) -> Any:
        return self.shards[0].storage_type()

    def get_dtype(self) -> Any:
        return self.dtype

    def get_layout(self) -> Any:
        return self.layout

    def is_allocated(self) -> bool:
        return all(shard.is_allocated() for shard in self.shards)

    def volume(self) -> int:
        return self.shards[0].volume()

    def logical_volume(self) -> int:
        return self.shards[0].logical_volume()

    def deallocate(self, force: bool = False) -> None:
        for shard in self.shards:
            shard.deallocate(force)

    def cpu(self, blocking: bool = True) -> "MeshTensor":
        return MeshTensor([shard.cpu() for shard in self.shards], None)

    def __getitem__(self, key: object) -> "MeshTensor":
        return MeshTensor([shard[key] for shard in self.shards], self._device)

    def __repr__(self) -> str:
        place = "host" if self._device is None else "device"
        return (f"ttnn.Tensor(shape={list(self.shape)}, dtype={self.dtype.name}, layout={self.layout.name}, {place}, "
                f"{len(self.shards)} chips)")


# --- mesh mappers and composers -----------------------------------------------------------------


class ReplicateTensorToMesh:
    """Every chip holds the whole tensor."""

    def __init__(self, mesh_device: MeshDevice) -> None:
        self.mesh_device = mesh_device

    def shards(self, value: torch.Tensor) -> list[torch.Tensor]:
        return [value] * self.mesh_device.get_num_devices()


def _split(value: torch.Tensor, dim: int, parts: int, what: str) -> list[torch.Tensor]:
    size = value.shape[dim]
    if size % parts:
        raise TTFatal(f"{what}: dim {dim} of shape {list(value.shape)} ({size}) does not split into {parts} equal "
                      f"shards")
    return list(value.chunk(parts, dim))


class ShardTensorToMesh:
    """Chip ``i`` holds the ``i``-th of ``num_devices`` equal slices along ``dim``."""

    def __init__(self, mesh_device: MeshDevice, dim: int) -> None:
        self.mesh_device = mesh_device
        self.dim = dim

    def shards(self, value: torch.Tensor) -> list[torch.Tensor]:
        return _split(value, self.dim, self.mesh_device.get_num_devices(), "ShardTensorToMesh")


class ShardTensor2dMesh:
    """Chip ``(r, c)`` holds slice ``r`` of ``dims[0]`` and slice ``c`` of ``dims[1]`` (None: that mesh axis
    replicates)."""

    def __init__(self, mesh_device: MeshDevice, mesh_shape: MeshShape | Sequence[int],
                 dims: Sequence[int | None]) -> None:
        self.mesh_device = mesh_device
        self.mesh_shape = tuple(mesh_shape)
        self.dims = tuple(dims)
        check(self.mesh_shape == tuple(mesh_device.shape), "ShardTensor2dMesh",
              f"mesh_shape {self.mesh_shape} is not the device's {tuple(mesh_device.shape)}")

    def shards(self, value: torch.Tensor) -> list[torch.Tensor]:
        rows, cols = self.mesh_shape
        row_dim, col_dim = self.dims
        by_row = [value] * rows if row_dim is None else _split(value, row_dim, rows, "ShardTensor2dMesh")
        return [part for row in by_row
                for part in ([row] * cols if col_dim is None else _split(row, col_dim, cols, "ShardTensor2dMesh"))]


class ConcatMeshToTensor:
    """The chips' tensors concatenated along ``dim``, in chip order."""

    def __init__(self, mesh_device: MeshDevice, dim: int) -> None:
        self.mesh_device = mesh_device
        self.dim = dim

    def compose(self, values: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(values, dim=self.dim)


class ConcatMesh2dToTensor:
    """Rows of the mesh concatenated along ``dims[0]``, the chips of a row along ``dims[1]``."""

    def __init__(self, mesh_device: MeshDevice, mesh_shape: MeshShape | Sequence[int], dims: Sequence[int]) -> None:
        self.mesh_device = mesh_device
        self.mesh_shape = tuple(mesh_shape)
        self.dims = tuple(dims)
        check(self.dims[0] != self.dims[1], "ConcatMesh2dToTensor", f"dims {self.dims} must differ")

    def compose(self, values: list[torch.Tensor]) -> torch.Tensor:
        rows, cols = self.mesh_shape
        check(len(values) == rows * cols, "ConcatMesh2dToTensor",
              f"{len(values)} chips do not form a {rows}x{cols} mesh")
        return torch.cat([torch.cat(values[r * cols:(r + 1) * cols], dim=self.dims[1]) for r in range(rows)],
                         dim=self.dims[0])


def get_device_tensors(tensor: Tensor | MeshTensor) -> list[Tensor]:
    """The per-chip tensors (a single-chip tensor is its own)."""
    return list(tensor.shards) if isinstance(tensor, MeshTensor) else [tensor]


# --- running ops chip by chip -------------------------------------------------------------------


_NESTING = (MeshTensor, list, tuple)  # the operands that may hold mesh tensors


def _chips_of(values: Any) -> int | None:
    """The chip count of the mesh tensors among an op's arguments (None without any); they must agree."""
    found = None
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, MeshTensor):
            check(found in (None, len(value.shards)), "mesh op",
                  f"operands live on meshes of {found} and {len(value.shards)} chips")
            found = len(value.shards)
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return found


def _on(value: Any, chip: int) -> Any:
    if isinstance(value, MeshTensor):
        return value.shards[chip]
    if isinstance(value, (list, tuple)) and any(isinstance(v, (MeshTensor, list, tuple)) for v in value):
        return type(value)(_on(v, chip) for v in value)
    return value


def _gather(results: list[Any], operands: list[Any]) -> Any:
    """Per-chip results as one result: tensors become mesh tensors (the operand itself when the op wrote into it)."""
    first = results[0]
    if isinstance(first, Tensor):
        for operand in operands:
            if isinstance(operand, MeshTensor) and all(a is b for a, b in zip(operand.shards, results)):
                return operand
        return MeshTensor(results, first.device())
    if isinstance(first, (list, tuple)):
        return type(first)(_gather([r[i] for r in results], operands) for i in range(len(first)))
    return first


def per_chip(fn: Callable) -> Callable:
    """Run a device op once per chip when any operand is a mesh tensor."""

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        operands = [*args, *kwargs.values()]
        for value in operands:
            if isinstance(value, _NESTING):
                break
        else:  # a single-chip op (the common case): nothing to look into
            return fn(*args, **kwargs)
        chips = _chips_of(operands)
        if chips is None:
            return fn(*args, **kwargs)
        results = []
        for chip in range(chips):
            with on_chip(chip):
                results.append(fn(*(_on(a, chip) for a in args), **{k: _on(v, chip) for k, v in kwargs.items()}))
        return _gather(results, operands)

    op.__wrapped_per_chip__ = fn
    return op
