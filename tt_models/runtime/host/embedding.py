"""ttnn.embedding: rows of a bfloat16 table gathered by uint32 (or bfloat16) indices."""

from __future__ import annotations

import enum

import torch

from .core import _check_on_device, _into
from .errors import check, unsupported
from .tensor import Tensor
from .types import DataType, Layout, MemoryConfig

__all__ = ["EmbeddingsType", "embedding"]


class EmbeddingsType(enum.Enum):
    GENERIC = 0
    PADDED = 1
    BINARY = 2


def embedding(input_tensor: Tensor, weight: Tensor, *, padding_idx: int | None = None, layout: Layout | None = None,
              embeddings_type: EmbeddingsType = EmbeddingsType.GENERIC, dtype: DataType | None = None,
              memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None) -> Tensor:
    """``weight[input]``: indices ``[B, S]`` or ``[B, 1, 1, S]`` give ``[B, S, D]``.

    As ttnn's C++ op does, the output layout defaults to the weight's layout, and ``dtype`` only applies to
    TILE outputs. ``padding_idx`` changes no values (the pad row is read like any other).
    """
    op = "embedding"
    _check_on_device(input_tensor, op)
    _check_on_device(weight, op)
    check(input_tensor.dtype in (DataType.UINT32, DataType.BFLOAT16), op, "input must be UINT32 or BFLOAT16")
    check(weight.dtype == DataType.BFLOAT16, op, f"weights must be BFLOAT16, got {weight.dtype.name}")
    check(not input_tensor.is_sharded() and not weight.is_sharded(), op, "sharded inputs/weights are not supported")
    shape = list(input_tensor.shape)
    if not (len(shape) == 2 or (len(shape) == 4 and shape[1] == shape[2] == 1)):
        raise unsupported(op, f"index tensors of shape {shape} (use [B, S] or [B, 1, 1, S])")
    check(len(weight.shape) == 2 or all(d == 1 for d in weight.shape[:-2]), op,
          f"weights must be [V, D] or [1, 1, V, D], got {list(weight.shape)}")
    vocab, width = weight.shape[-2], weight.shape[-1]
    if padding_idx is not None:
        embeddings_type = EmbeddingsType.PADDED
        check(0 <= padding_idx < vocab, op, f"padding_idx {padding_idx} is outside the table of {vocab} rows")
    check(embeddings_type != EmbeddingsType.BINARY or vocab == 2, op, "BINARY embeddings need exactly 2 rows")
    check(embeddings_type != EmbeddingsType.PADDED or padding_idx is not None, op, "PADDED needs padding_idx")
    out_layout = weight.layout if layout is None else layout
    check(out_layout == Layout.TILE or dtype in (None, weight.dtype), op,
          "can only typecast output embeddings when producing TILE_LAYOUT output")
    index = input_tensor.value.reshape(shape[0], shape[-1]).to(torch.int64)
    if embeddings_type == EmbeddingsType.BINARY:
        index = (index != 0).to(torch.int64)
    bad = index[(index < 0) | (index >= vocab)]
    check(bad.numel() == 0, op, f"indices must lie in [0, {vocab}); got {bad[:4].tolist()}")
    values = weight.float().reshape(vocab, width)[index]
    out = input_tensor.like(values, dtype=dtype or weight.dtype, layout=out_layout,
                            memory_config=memory_config or input_tensor.memory_config())
    return _into(output_tensor, out)
