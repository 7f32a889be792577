"""Data-movement ops: reshape, permute, transpose, concat, slice, pad, (un)squeeze, repeats, copy.

They move logical values and keep the input's dtype and layout. bfloat16/float32 values come out
unchanged; bfloat8_b/bfloat4_b outputs are re-packed (values that land in a new 16-value block share
its exponent), as the device's packer does.
"""

from __future__ import annotations

import builtins
import enum
import math
from typing import Sequence

import torch

from .core import _check_on_device, _into
from .errors import check, unsupported
from .tensor import Tensor
from .types import CoreRangeSet, DataType, Layout, MemoryConfig, Shape

__all__ = [
    "TileReshapeMapMode",
    "reshape",
    "permute",
    "transpose",
    "concat",
    "slice",
    "pad",
    "squeeze",
    "unsqueeze",
    "repeat_interleave",
    "repeat",
    "copy",
]


class TileReshapeMapMode(enum.Enum):
    CACHE = 0
    RECREATE = 1


def _out(tensor: Tensor, values: torch.Tensor, memory_config: MemoryConfig | None) -> Tensor:
    """The output of an op that moved ``tensor``'s values (and others of its dtype) to ``values``."""
    return tensor.rearranged(values, memory_config=memory_config or tensor.memory_config())


def _dim(dim: int, rank: int, op: str) -> int:
    check(-rank <= dim < rank, op, f"dim {dim} is out of range for rank {rank}")
    return dim % rank


def reshape(input_tensor: Tensor, shape: Shape | Sequence[int], *, memory_config: MemoryConfig | None = None,
            pad_value: int | float | None = None, reshape_tile_mode: TileReshapeMapMode = TileReshapeMapMode.CACHE,
            sub_core_grids: CoreRangeSet | None = None, skip_padding_fill: bool = False) -> Tensor:
    _check_on_device(input_tensor, "reshape")
    dims = [int(d) for d in shape]
    check(dims.count(-1) <= 1 and all(d >= -1 for d in dims), "reshape", f"invalid shape {dims}")
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        check(known > 0 and input_tensor.volume() % known == 0, "reshape",
              f"cannot infer -1 in {dims} for volume {input_tensor.volume()}")
        dims[dims.index(-1)] = input_tensor.volume() // known
    check(math.prod(dims) == input_tensor.volume(), "reshape",
          f"shape {dims} has volume {math.prod(dims)}, the input {list(input_tensor.shape)} has "
          f"{input_tensor.volume()}")
    return _out(input_tensor, input_tensor.value.reshape(dims), memory_config)


def permute(input_tensor: Tensor, dims: Sequence[int], *, memory_config: MemoryConfig | None = None,
            pad_value: float = 0.0) -> Tensor:
    _check_on_device(input_tensor, "permute")
    rank = len(input_tensor.shape)
    order = [_dim(int(d), rank, "permute") for d in dims]
    check(sorted(order) == list(range(rank)), "permute", f"dims {list(dims)} are not a permutation of rank {rank}")
    return _out(input_tensor, input_tensor.value.permute(order).contiguous(), memory_config)


def transpose(input_tensor: Tensor, dim1: int, dim2: int, *, memory_config: MemoryConfig | None = None,
              pad_value: float = 0.0) -> Tensor:
    _check_on_device(input_tensor, "transpose")
    rank = len(input_tensor.shape)
    d1, d2 = _dim(dim1, rank, "transpose"), _dim(dim2, rank, "transpose")
    return _out(input_tensor, input_tensor.value.transpose(d1, d2).contiguous(), memory_config)


def concat(tensors: Sequence[Tensor], dim: int = 0, *, memory_config: MemoryConfig | None = None,
           output_tensor: Tensor | None = None, groups: int = 1, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    check(len(tensors) > 0, "concat", "needs at least one tensor")
    if groups != 1:
        raise unsupported("concat", "groups > 1")
    first = tensors[0]
    for t in tensors:
        _check_on_device(t, "concat")
        check(t.dtype == first.dtype and t.layout == first.layout, "concat",
              "all inputs must have the same dtype and layout")
        check(len(t.shape) == len(first.shape), "concat", "all inputs must have the same rank")
    d = _dim(dim, len(first.shape), "concat")
    for t in tensors:
        same = all(a == b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d)
        check(same, "concat", f"shapes {list(first.shape)} and {list(t.shape)} differ outside dim {dim}")
    out = _out(first, torch.cat([t.value for t in tensors], dim=d), memory_config)
    return _into(output_tensor, out)


def slice(input_tensor: Tensor, slice_start: Sequence[int], slice_end: Sequence[int],
          slice_step: Sequence[int] | None = None, *, memory_config: MemoryConfig | None = None,
          output_tensor: Tensor | None = None, pad_value: float | None = None,
          sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    _check_on_device(input_tensor, "slice")
    shape = list(input_tensor.shape)
    step = [1] * len(shape) if slice_step is None else [int(s) for s in slice_step]
    check(len(slice_start) == len(shape) and len(slice_end) == len(shape) and len(step) == len(shape), "slice",
          f"starts/ends/steps must have one entry per dim of {shape}")
    check(all(s > 0 for s in step), "slice", f"steps must be positive, got {step}")
    check(not (input_tensor.dtype == DataType.BFLOAT8_B and any(s != 1 for s in step)), "slice",
          "strided slicing is not supported for bfloat8_b")
    index = []
    for size, b, e, s in zip(shape, slice_start, slice_end, step):
        b, e = int(b) + size * (int(b) < 0), int(e) + size * (int(e) < 0)
        check(0 <= b < e <= size, "slice", f"range [{b}, {e}) is empty or out of bounds for a dim of {size}")
        index.append(builtins.slice(b, e, s))
    out = _out(input_tensor, input_tensor.value[tuple(index)].contiguous(), memory_config)
    return _into(output_tensor, out)


def pad(input_tensor: Tensor, padding: Sequence[Sequence[int]], value: float, *, use_multicore: bool = True,
        memory_config: MemoryConfig | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    _check_on_device(input_tensor, "pad")
    rank = len(input_tensor.shape)
    pairs = [(0, 0)] * (rank - len(padding)) + [(int(a), int(b)) for a, b in padding]
    check(len(pairs) == rank and all(a >= 0 and b >= 0 for a, b in pairs), "pad",
          f"padding {list(padding)} must be at most one non-negative (front, back) pair per dim")
    check(input_tensor.layout != Layout.TILE or all(a == 0 for a, _ in pairs), "pad",
          "front padding is not supported for TILE layout on device")
    flat = [p for a, b in reversed(pairs) for p in (a, b)]
    values = torch.nn.functional.pad(input_tensor.value, flat, value=value)
    # like, not _out: the pad value is not one of the tensor's values, it may need rounding to its dtype
    return input_tensor.like(values, memory_config=memory_config or input_tensor.memory_config())


def squeeze(input_tensor: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    _check_on_device(input_tensor, "squeeze")
    rank = len(input_tensor.shape)
    if dim is None:
        values = input_tensor.value.squeeze()
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        values = input_tensor.value.squeeze(tuple(_dim(d, rank, "squeeze") for d in dims))
    return _out(input_tensor, values, None)


def unsqueeze(input_tensor: Tensor, dim: int) -> Tensor:
    _check_on_device(input_tensor, "unsqueeze")
    return _out(input_tensor, input_tensor.value.unsqueeze(_dim(dim, len(input_tensor.shape) + 1, "unsqueeze")),
                None)


def repeat_interleave(input_tensor: Tensor, repeats: int, dim: int, *,
                      memory_config: MemoryConfig | None = None) -> Tensor:
    _check_on_device(input_tensor, "repeat_interleave")
    check(repeats >= 1, "repeat_interleave", f"repeats must be >= 1, got {repeats}")
    d = _dim(dim, len(input_tensor.shape), "repeat_interleave")
    return _out(input_tensor, input_tensor.value.repeat_interleave(repeats, dim=d), memory_config)


def repeat(input_tensor: Tensor, repeat_dims: Sequence[int], *, memory_config: MemoryConfig | None = None,
           optional_output_tensor: Tensor | None = None) -> Tensor:
    _check_on_device(input_tensor, "repeat")
    rank = len(input_tensor.shape)
    reps = [int(r) for r in repeat_dims]
    check(all(r >= 1 for r in reps), "repeat", f"repeat_dims must be positive, got {reps}")
    reps = [1] * (rank - len(reps)) + reps  # fewer dims than the rank repeat the trailing dims
    out = _out(input_tensor, input_tensor.value.repeat(*reps), memory_config)
    return _into(optional_output_tensor, out)


def copy(input_a: Tensor, input_b: Tensor) -> None:
    """``input_b`` takes ``input_a``'s values in place (the buffer stays, so a captured trace reading it sees them);
    equal shapes and layouts, values rounded to ``input_b``'s dtype."""
    for t in (input_a, input_b):
        _check_on_device(t, "copy")
    check(tuple(input_a.shape) == tuple(input_b.shape), "copy",
          f"input shapes {list(input_a.shape)} and {list(input_b.shape)} must be equal")
    check(input_a.layout == input_b.layout, "copy", "both inputs must have the same layout")
    _into(input_b, input_a)
