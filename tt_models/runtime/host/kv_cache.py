"""Non-paged KV-cache writes: ``ttnn.fill_cache`` (prefill, one user) and ``ttnn.update_cache`` (decode, one
position for every user). Caches are ``[B, H, S_max, D]``, updated in place and returned."""

from __future__ import annotations

import torch

from .errors import check
from .paged_cache import fp32_dest, write_rows
from .tensor import Tensor
from .types import TILE_SIZE, DataType, Layout, WormholeComputeKernelConfig

__all__ = ["fill_cache", "update_cache"]


def fill_cache(cache_tensor: Tensor, input_tensor: Tensor, batch_idx: int, *, update_idx: int = 0) -> Tensor:
    op = "fill_cache"
    check(cache_tensor.layout == Layout.TILE and input_tensor.layout == Layout.TILE, op,
          "Inputs to fill_cache must be tilized")
    check(input_tensor.dtype == cache_tensor.dtype, op,
          f"input dtype {input_tensor.dtype.name} must match the cache dtype {cache_tensor.dtype.name}")
    check(input_tensor.shape[0] == 1, op, "Dim 0 of input tensor must be 1")
    check(input_tensor.shape[1] == cache_tensor.shape[1] and input_tensor.shape[3] == cache_tensor.shape[3], op,
          f"input {list(input_tensor.shape)} and cache {list(cache_tensor.shape)} differ in heads or head dim")
    check(0 <= batch_idx < cache_tensor.shape[0], op,
          f"batch_idx {batch_idx} is outside the cache batch {cache_tensor.shape[0]}")
    check(update_idx % TILE_SIZE == 0, op, f"update_idx {update_idx} must be a multiple of {TILE_SIZE}")
    seq = input_tensor.padded_shape[2]
    check(update_idx + seq <= cache_tensor.padded_shape[2], op,
          f"input seq_len {seq} from update_idx {update_idx} exceeds the cache seq_len {cache_tensor.padded_shape[2]}")
    # A raw copy of whole tiles: padding rows of the last tile land in the cache as zeros.
    rows = min(seq, cache_tensor.shape[2] - update_idx)
    src = torch.nn.functional.pad(input_tensor.value[0], (0, 0, 0, seq - input_tensor.shape[2]))
    cache_tensor.value[batch_idx, :, update_idx:update_idx + rows, :] = src[:, :rows, :]
    return cache_tensor


def update_cache(cache: Tensor, input: Tensor, update_idx: int, *, batch_offset: int = 0,
                 compute_kernel_config: WormholeComputeKernelConfig | None = None) -> Tensor:
    op = "update_cache"
    check(cache.layout == Layout.TILE and input.layout == Layout.TILE, op, "Inputs to update_cache must be tilized")
    check(input.dtype in (DataType.FLOAT32, DataType.BFLOAT16, DataType.BFLOAT8_B), op,
          f"input dtype must be FLOAT32, BFLOAT16 or BFLOAT8_B, got {input.dtype.name}")
    check(input.shape[0] == 1, op, "Dim 0 of input tensor must be 1")
    check(input.shape[1] == cache.shape[1] and input.shape[3] == cache.shape[3], op,
          f"input {list(input.shape)} and cache {list(cache.shape)} differ in heads or head dim")
    users = cache.shape[0]
    check(0 <= update_idx < cache.shape[2], op,
          f"update_idx {update_idx} is outside the cache seq_len {cache.shape[2]}")
    check(batch_offset == 0 or users < TILE_SIZE, op, "batch_offset must be 0 when the cache batch is >= 32")
    check(batch_offset + users <= input.padded_shape[2], op,
          f"batch_offset {batch_offset} + cache batch {users} exceeds the input's {input.padded_shape[2]} user rows")
    # The input holds the users along dim 2 ([1, H, users, D]); rows past the logical users are tile padding (0).
    src = torch.nn.functional.pad(input.float()[0], (0, 0, 0, input.padded_shape[2] - input.shape[2]))
    rows = src[:, batch_offset:batch_offset + users, :].transpose(0, 1)
    write_rows(cache.value, cache.dtype, torch.arange(users), torch.full((users,), update_idx), rows,
               fp32_dest(compute_kernel_config))
    return cache
