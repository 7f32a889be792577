"""Reductions: ``sum`` over one dim or all of them (the router weights of a mixture of experts add so)."""

from __future__ import annotations

import torch

from .core import _check_on_device
from .errors import check, unsupported
from .tensor import Tensor
from .types import CoreRangeSet, Layout, MemoryConfig

__all__ = ["sum"]


def sum(input_tensor: Tensor, dim: int | None = None, keepdim: bool = False, *,
        memory_config: MemoryConfig | None = None, compute_kernel_config: object = None, scalar: float = 1.0,
        correction: object = None, sub_core_grids: CoreRangeSet | None = None, fast_and_approximate_mode: bool = False,
        output_layout: Layout | None = None) -> Tensor:
    """``scalar`` times the sum over ``dim`` (all dims when None), in the input's dtype (fp32 accumulation)."""
    op = "sum"
    _check_on_device(input_tensor, op)
    check(input_tensor.is_float, op, lambda: f"unsupported input dtype {input_tensor.dtype.name}")
    if output_layout not in (None, input_tensor.layout):
        raise unsupported(op, "an output_layout other than the input's")
    rank = len(input_tensor.shape)
    check(dim is None or -rank <= dim < rank, op, lambda: f"dim {dim} is out of range for rank {rank}")
    values = input_tensor.float()
    total = values.sum(dim=dim, keepdim=keepdim) if dim is not None else values.sum().reshape(
        [1] * rank if keepdim else [])
    return input_tensor.like(total * scalar, memory_config=memory_config or input_tensor.memory_config())
