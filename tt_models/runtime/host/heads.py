"""Attention head reshapes (``ttnn.experimental.nlp_create_qkv_heads[_decode]`` / ``nlp_concat_heads[_decode]``).

Pure data movement: values and dtypes pass through unchanged. The decode variants produce the layout the
decode ops require: ``[1, B, heads, D]`` height-sharded one user per core, each shard the user's heads padded
to whole 32-row tiles.
"""

from __future__ import annotations

import functools

import torch

from .errors import check, unsupported
from .tensor import Tensor
from .types import (
    TILE_SIZE, BufferType, CoreCoord, CoreRange, CoreRangeSet, DataType, Layout, MemoryConfig, ShardOrientation,
    ShardSpec, TensorMemoryLayout,
)

__all__ = ["nlp_create_qkv_heads", "nlp_create_qkv_heads_decode", "nlp_concat_heads", "nlp_concat_heads_decode"]


def _round_tile(n: int) -> int:
    return -(-n // TILE_SIZE) * TILE_SIZE


@functools.lru_cache(maxsize=64)
def _cores(start: int, count: int, grid: CoreCoord) -> CoreRangeSet:
    """Cores ``start .. start+count-1`` of the grid, row by row (built once: every decode layer asks again)."""
    check(start + count <= grid.x * grid.y, "core grid", f"{start + count} cores do not fit a {grid.x}x{grid.y} grid")
    coords = [CoreCoord(i % grid.x, i // grid.x) for i in range(start, start + count)]
    return CoreRangeSet([CoreRange(c, c) for c in coords])


def _sharded(layout: TensorMemoryLayout, grid: CoreRangeSet, shard: tuple[int, int]) -> MemoryConfig:
    return MemoryConfig(layout, BufferType.L1, ShardSpec(grid, shard, ShardOrientation.ROW_MAJOR))


def nlp_create_qkv_heads(input: Tensor, input_kv: Tensor | None = None, *, num_heads: int,
                         num_kv_heads: int | None = None, transpose_k_heads: bool = True, kv_tied: bool = False,
                         memory_config: MemoryConfig | None = None,
                         output_tensors: list[Tensor | None] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    op = "nlp_create_qkv_heads"
    if kv_tied or output_tensors is not None:
        raise unsupported(op, "kv_tied / output_tensors")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check(input.layout == Layout.TILE, op, "input must be in TILE layout")
    check(len(input.shape) == 4 and input.shape[1] == 1, op,
          lambda: f"input must be [B, 1, S, W], got {list(input.shape)}")
    batch, _, seq, width = input.shape
    x = input.value
    if input_kv is None:
        check(width % (num_heads + 2 * num_kv_heads) == 0, op,
              f"input width {width} is not (num_heads + 2 * num_kv_heads) * head_dim")
        dim = width // (num_heads + 2 * num_kv_heads)
        q, kv = x[..., :num_heads * dim], x[..., num_heads * dim:]
    else:
        check(input_kv.shape[:3] == input.shape[:3], op, "input and input_kv must agree on batch and sequence")
        check(width % num_heads == 0, op, f"input width {width} is not a multiple of num_heads {num_heads}")
        dim = width // num_heads
        check(input_kv.shape[-1] == 2 * num_kv_heads * dim, op,
              lambda: f"input_kv width {input_kv.shape[-1]} must be 2 * num_kv_heads * head_dim = "
                      f"{2 * num_kv_heads * dim}")
        q, kv = x, input_kv.value
    check(dim % TILE_SIZE == 0, op, f"head_dim {dim} must be a multiple of {TILE_SIZE}")

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:  # [B, 1, S, n*D] -> [B, n, S, D]
        return t.reshape(batch, seq, n, dim).transpose(1, 2).contiguous()

    k = heads(kv[..., :num_kv_heads * dim], num_kv_heads)
    v = heads(kv[..., num_kv_heads * dim:], num_kv_heads)
    if transpose_k_heads:
        k = k.transpose(-1, -2).contiguous()
    mc = memory_config or input.memory_config()
    # K and V come from input_kv when given: rounded to the input's dtype unless they are in it already.
    out = input.rearranged if input_kv is None or input_kv.dtype == input.dtype else input.like
    return tuple(out(t, memory_config=mc) for t in (heads(q, num_heads), k, v))


def nlp_create_qkv_heads_decode(input_tensor: Tensor, *, num_heads: int, num_kv_heads: int | None = None,
                                output_tensors: list[Tensor] | None = None, overlap_qk_coregrid: bool | None = True,
                                batch_offset: Tensor | None = None, slice_size: int | None = None,
                                memory_config: MemoryConfig | None = None) -> tuple[Tensor, Tensor, Tensor]:
    op = "nlp_create_qkv_heads_decode"
    if output_tensors is not None:
        raise unsupported(op, "output_tensors")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check(input_tensor.dtype == DataType.BFLOAT16, op, lambda: f"input must be BFLOAT16, got {input_tensor.dtype.name}")
    check(input_tensor.layout == Layout.TILE, op, "input must be in TILE layout")
    check(len(input_tensor.shape) == 4 and input_tensor.shape[:2] == (1, 1), op,
          lambda: f"input must be [1, 1, B, W], got {list(input_tensor.shape)}")
    users, width = input_tensor.shape[2], input_tensor.shape[3]
    check(users <= TILE_SIZE, op, f"batch {users} must be <= {TILE_SIZE}")
    check(width % (num_heads + 2 * num_kv_heads) == 0, op,
          f"input width {width} is not (num_heads + 2 * num_kv_heads) * head_dim")
    dim = width // (num_heads + 2 * num_kv_heads)
    check(dim % TILE_SIZE == 0, op, f"head_dim {dim} must be a multiple of {TILE_SIZE}")
    x = input_tensor.value[0, 0]
    check((batch_offset is None) == (slice_size is None), op, "batch_offset and slice_size go together")
    if batch_offset is not None:
        start = int(batch_offset.value.reshape(-1)[0])
        check(0 <= start and start + slice_size <= users, op,
              lambda: f"slice [{start}, {start + slice_size}) is outside the batch {users}")
        x, users = x[start:start + slice_size], slice_size
    q = x[:, :num_heads * dim].reshape(1, users, num_heads, dim)
    k = x[:, num_heads * dim:(num_heads + num_kv_heads) * dim].reshape(1, users, num_kv_heads, dim)
    v = x[:, (num_heads + num_kv_heads) * dim:].reshape(1, users, num_kv_heads, dim)
    grid = input_tensor.device().compute_with_storage_grid_size()
    q_cores = _cores(0, users, grid)
    # Without overlap, K and V sit on the cores after Q's (so a fused K/V cache update sees disjoint grids).
    kv_cores = q_cores if overlap_qk_coregrid else _cores(users, users, grid)
    outs = []
    for t, n, cores in ((q, num_heads, q_cores), (k, num_kv_heads, kv_cores), (v, num_kv_heads, kv_cores)):
        mc = _sharded(TensorMemoryLayout.HEIGHT_SHARDED, cores, (_round_tile(n), dim))
        outs.append(input_tensor.rearranged(t.contiguous(), memory_config=mc))
    return tuple(outs)


def nlp_concat_heads(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None) -> Tensor:
    op = "nlp_concat_heads"
    check(input_tensor.layout == Layout.TILE, op, "input must be in TILE layout")
    check(len(input_tensor.shape) == 4, op, f"input must be [B, NH, S, D], got {list(input_tensor.shape)}")
    batch, heads, seq, dim = input_tensor.shape
    check(dim % TILE_SIZE == 0, op, f"head_dim {dim} must be a multiple of {TILE_SIZE}")
    out = input_tensor.value.transpose(1, 2).reshape(batch, 1, seq, heads * dim)
    return input_tensor.rearranged(out, memory_config=memory_config or input_tensor.memory_config())


def nlp_concat_heads_decode(input_tensor: Tensor, *, num_heads: int, memory_config: MemoryConfig | None = None,
                            output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    op = "nlp_concat_heads_decode"
    if output_tensor is not None:
        raise unsupported(op, "output_tensor")
    check(input_tensor.layout == Layout.TILE, op, "input must be in TILE layout")
    check(input_tensor.is_sharded() and
          input_tensor.memory_config().memory_layout == TensorMemoryLayout.HEIGHT_SHARDED, op,
          "input must be height sharded")
    check(len(input_tensor.shape) == 4 and input_tensor.shape[0] == 1, op,
          lambda: f"input must be [1, B, heads, D], got {list(input_tensor.shape)}")
    _, users, heads, dim = input_tensor.shape
    check(users <= TILE_SIZE, op, f"batch {users} must be <= {TILE_SIZE}")
    check(num_heads <= heads, op, f"num_heads {num_heads} exceeds the input's {heads} head rows")
    # The output's rows are the tile of users, padding included (as the real op reports them).
    out = input_tensor.value[0, :, :num_heads, :].reshape(1, 1, users, num_heads * dim)
    out = torch.nn.functional.pad(out, (0, 0, 0, TILE_SIZE - users))
    if memory_config is None:
        grid = sub_core_grids or _cores(0, num_heads, input_tensor.device().compute_with_storage_grid_size())
        memory_config = _sharded(TensorMemoryLayout.WIDTH_SHARDED, grid, (TILE_SIZE, dim))
    return input_tensor.rearranged(out, memory_config=memory_config)
