"""matmul / linear and the matmul program configs (accepted for their fused activation; tiling is ignored).

The memory layouts the programs read are checked as the real ops check them: a DRAM-sharded program needs a
width-sharded activation, a DRAM width-sharded weight and a sharded output (whose shard spec it derives), a
sharded weight needs a program config that reads it, and a sharded activation takes its activation function in
the program config.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from .core import _check_on_device, _into
from .eltwise import Activation, UnaryOpType, UnaryWithParam, activation_function
from .errors import check, unsupported
from .tensor import Tensor
from .types import (
    DRAM_MEMORY_CONFIG, TILE_SIZE, BufferType, CoreCoord, CoreGrid, CoreRangeSet, DataType, Layout, MemoryConfig,
    ShardSpec, TensorMemoryLayout,
)

__all__ = [
    "MatmulMultiCoreReuseProgramConfig",
    "MatmulMultiCoreReuseMultiCastProgramConfig",
    "MatmulMultiCoreReuseMultiCast1DProgramConfig",
    "MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig",
    "matmul",
    "linear",
]


def _as_activation(fused_activation: UnaryWithParam | UnaryOpType | None) -> UnaryWithParam | None:
    return UnaryWithParam(fused_activation) if isinstance(fused_activation, UnaryOpType) else fused_activation


class MatmulMultiCoreReuseProgramConfig:
    def __init__(self, *, compute_with_storage_grid_size: CoreCoord, in0_block_w: int, out_subblock_h: int,
                 out_subblock_w: int, per_core_M: int, per_core_N: int,
                 allowed_worker_cores: CoreRangeSet | None = None) -> None:
        self.compute_with_storage_grid_size = compute_with_storage_grid_size
        self.in0_block_w = in0_block_w
        self.out_subblock_h = out_subblock_h
        self.out_subblock_w = out_subblock_w
        self.per_core_M = per_core_M
        self.per_core_N = per_core_N
        self.allowed_worker_cores = allowed_worker_cores


class MatmulMultiCoreReuseMultiCastProgramConfig:
    def __init__(self, *, compute_with_storage_grid_size: CoreCoord, in0_block_w: int, out_subblock_h: int,
                 out_subblock_w: int, out_block_h: int | None = None, out_block_w: int | None = None,
                 per_core_M: int, per_core_N: int, transpose_mcast: bool,
                 fused_activation: UnaryWithParam | UnaryOpType | None = None, fuse_batch: bool = True,
                 allowed_worker_cores: CoreRangeSet | None = None) -> None:
        self.compute_with_storage_grid_size = compute_with_storage_grid_size
        self.in0_block_w = in0_block_w
        self.out_subblock_h = out_subblock_h
        self.out_subblock_w = out_subblock_w
        self.out_block_h = out_block_h
        self.out_block_w = out_block_w
        self.per_core_M = per_core_M
        self.per_core_N = per_core_N
        self.transpose_mcast = transpose_mcast
        self.fused_activation = _as_activation(fused_activation)
        self.fuse_batch = fuse_batch
        self.allowed_worker_cores = allowed_worker_cores


class MatmulMultiCoreReuseMultiCast1DProgramConfig:
    def __init__(self, *, compute_with_storage_grid_size: CoreCoord, in0_block_w: int, out_subblock_h: int,
                 out_subblock_w: int, out_block_h: int | None = None, out_block_w: int | None = None,
                 per_core_M: int, per_core_N: int, fuse_batch: bool,
                 fused_activation: UnaryWithParam | UnaryOpType | None = None, mcast_in0: bool,
                 gather_in0: bool = False, hop_cores: CoreRangeSet = CoreRangeSet([]), num_global_cb_receivers: int = 1,
                 untilize_out: bool = False, allowed_worker_cores: CoreRangeSet | None = None,
                 stream_in1: bool = False) -> None:
        if untilize_out:
            raise unsupported("MatmulMultiCoreReuseMultiCast1DProgramConfig", "untilize_out=True")
        self.compute_with_storage_grid_size = compute_with_storage_grid_size
        self.in0_block_w = in0_block_w
        self.out_subblock_h = out_subblock_h
        self.out_subblock_w = out_subblock_w
        self.out_block_h = out_block_h
        self.out_block_w = out_block_w
        self.per_core_M = per_core_M
        self.per_core_N = per_core_N
        self.fuse_batch = fuse_batch
        self.fused_activation = _as_activation(fused_activation)
        self.mcast_in0 = mcast_in0
        self.gather_in0 = gather_in0
        self.hop_cores = hop_cores
        self.num_global_cb_receivers = num_global_cb_receivers
        self.untilize_out = untilize_out
        self.allowed_worker_cores = allowed_worker_cores
        self.stream_in1 = stream_in1


class MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig:
    def __init__(self, *, in0_block_w: int, per_core_M: int, per_core_N: int,
                 fused_activation: UnaryWithParam | UnaryOpType | None = None,
                 num_workers_per_dram_bank: int = 1) -> None:
        self.in0_block_w = in0_block_w
        self.per_core_M = per_core_M
        self.per_core_N = per_core_N
        self.fused_activation = _as_activation(fused_activation)
        self.num_workers_per_dram_bank = num_workers_per_dram_bank


ProgramConfig = (MatmulMultiCoreReuseProgramConfig | MatmulMultiCoreReuseMultiCastProgramConfig
                 | MatmulMultiCoreReuseMultiCast1DProgramConfig | MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig)


# As measured with torch's MKL (AVX-512, 1-16 threads): a row's bits are the same for every M that is a multiple of 4,
# but not for other M (a 1-3 row tail, or a thread's share of one, goes through another kernel).
GEMM_ROW_BLOCK = 4
# (K, N, M, rows computed, threads, weight strides) -> whether those rows gave the full product's bits here
_ROWWISE_CHECKED: dict[tuple, bool] = {}


def _rowwise_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` with rows that repeat ``x``'s last row computed once: a decode tile's padding rows (one token at
    position -1) are most of its 32 rows when few users run. The rows computed are padded to a multiple of
    ``GEMM_ROW_BLOCK``, and the first product of each such shape is checked against the full one, bit for bit, so
    the values are the full product's on any BLAS (tests/host/test_fast_paths.py)."""
    m, k = x.shape[-2], x.shape[-1]
    if m % GEMM_ROW_BLOCK or not 4 * GEMM_ROW_BLOCK <= m <= TILE_SIZE or math.prod(x.shape[:-2]) != 1:
        return torch.matmul(x, w)
    bits = x.reshape(m, k).view(torch.int32)  # bitwise: -0.0 is not 0.0 here, and a NaN row equals itself
    kept = (~(bits == bits[-1]).all(dim=1)).nonzero().flatten()
    computed = -(-(len(kept) + 1) // GEMM_ROW_BLOCK) * GEMM_ROW_BLOCK
    key = (k, w.shape[-1], m, computed, torch.get_num_threads(), w.stride())
    if computed > m * 3 // 4 or not _ROWWISE_CHECKED.get(key, True):
        return torch.matmul(x, w)
    out = torch.matmul(x.index_select(-2, torch.cat([kept, torch.full((computed - len(kept),), m - 1)])), w)
    source = torch.full((m,), len(kept))  # the last row's (and its repeats') place among the computed rows
    source[kept] = torch.arange(len(kept))
    out = out.index_select(-2, source)
    if key not in _ROWWISE_CHECKED:
        full = torch.matmul(x, w)
        _ROWWISE_CHECKED[key] = torch.equal(out.view(torch.int32), full.view(torch.int32))
        return full
    return out


def _check_layouts(op: str, a: Tensor, b: Tensor, program_config: ProgramConfig | None,
                   memory_config: MemoryConfig | None, activation: Activation | None) -> MemoryConfig | None:
    """The memory-layout rules of the real op's validation; returns the output memory config (a DRAM-sharded
    program's output shard spec worked out as the op does: the activation's cores, ``per_core_N`` tiles wide)."""
    if activation is not None:
        check(not a.is_sharded(), op, f"Sharded matmul run with {activation} activation: this should be placed in "
                                      "the program config's fused_activation field")
    if program_config is None:
        check(a.is_sharded() or not b.is_sharded(), op,
              lambda: "MatmulMultiCoreProgramConfig: Input B memory layout must be INTERLEAVED, got: "
                      f"{b.memory_config().memory_layout}")
        return memory_config
    if not isinstance(program_config, MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig):
        return memory_config
    name = "MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig"
    check(a.is_sharded() and a.memory_config().memory_layout == TensorMemoryLayout.WIDTH_SHARDED, op,
          f"{name}: Input A must be width-sharded")
    b_memory = b.memory_config()
    check(b_memory.memory_layout == TensorMemoryLayout.WIDTH_SHARDED and b_memory.buffer_type == BufferType.DRAM, op,
          lambda: f"{name}: Input B memory layout must be WIDTH_SHARDED in DRAM, got: {b_memory.memory_layout} "
                  f"in {b_memory.buffer_type}")
    check(memory_config is not None and memory_config.is_sharded(), op,
          f"{name}: Output memory config must be sharded for DRAM sharded program config")
    k_tiles = a.padded_shape[-1] // TILE_SIZE
    check(k_tiles % program_config.in0_block_w == 0, op,
          lambda: f"{name}: K ({k_tiles}) must be divisible by in0_block_w ({program_config.in0_block_w})")
    if memory_config.shard_spec is not None:
        return memory_config
    a_spec = a.memory_config().shard_spec
    return MemoryConfig(memory_config.memory_layout, memory_config.buffer_type,
                        ShardSpec(a_spec.grid, (a_spec.shape[0], program_config.per_core_N * TILE_SIZE),
                                  a_spec.orientation))


def _matmul(op: str, a: Tensor, b: Tensor, bias: Tensor | None, transpose_a: bool, transpose_b: bool,
            memory_config: MemoryConfig | None, dtype: DataType | None, program_config: ProgramConfig | None,
            activation: Activation | None, output_tile: object, optional_output_tensor: Tensor | None) -> Tensor:
    for name, t in (("input_tensor_a", a), ("input_tensor_b", b), ("bias", bias)):
        if t is not None:
            _check_on_device(t, op)
            check(t.layout == Layout.TILE, op, lambda: f"{name} must be in TILE layout, got {t.layout.name}")
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise unsupported(op, "1-D inputs (dot / vector products)")
    if output_tile is not None:
        raise unsupported(op, "output_tile (non-32x32 output tiles)")
    memory_config = _check_layouts(op, a, b, program_config, memory_config, activation)
    x, w = a.float(), b.float()
    if transpose_a:
        x = x.transpose(-1, -2)
    if transpose_b:
        w = w.transpose(-1, -2)
    check(x.shape[-1] == w.shape[-2], op,
          lambda: f"inner dims differ: input_tensor_a {list(a.shape)} has K={x.shape[-1]}, "
                  f"input_tensor_b {list(b.shape)} has K={w.shape[-2]}")
    rank = max(x.dim(), w.dim())
    batch_a = (1,) * (rank - x.dim()) + tuple(x.shape[:-2])
    batch_b = (1,) * (rank - w.dim()) + tuple(w.shape[:-2])
    reuse_a = math.prod(batch_a) == 1 and x.dim() == w.dim() >= 3
    check(math.prod(batch_b) == 1 or batch_a == batch_b or reuse_a, op,
          lambda: f"batch dims of input_tensor_a {list(x.shape[:-2])} and input_tensor_b {list(w.shape[:-2])}: b's "
                  "must be all 1, equal a's, or (a's all 1, same rank >= 3) be broadcast over a")
    out = _rowwise_matmul(x, w)
    if bias is not None:
        n = w.shape[-1]
        check(bias.shape[-1] == n and math.prod(bias.shape[:-1]) == 1, op,
              lambda: f"bias must be a single row of width N={n}, got shape {list(bias.shape)}")
        out = out + bias.float().reshape(n)
    fused = getattr(program_config, "fused_activation", None)
    if fused is not None or activation is not None:
        out = activation_function(fused if fused is not None else activation)(out)
    if out.dim() != x.dim():
        out = out.reshape(out.shape[out.dim() - x.dim():])  # the dims dropped here are all 1: rank of a, as ttnn
    dtype = dtype or (optional_output_tensor.dtype if optional_output_tensor is not None else None)
    result = a.like(out, dtype=dtype, layout=Layout.TILE, memory_config=memory_config or DRAM_MEMORY_CONFIG)
    return _into(optional_output_tensor, result)


def matmul(input_tensor_a: Tensor, input_tensor_b: Tensor, *, transpose_a: bool = False, transpose_b: bool = False,
           memory_config: MemoryConfig | None = None, dtype: DataType | None = None,
           program_config: ProgramConfig | None = None, activation: Activation | None = None,
           compute_kernel_config: object = None, core_grid: CoreGrid | None = None, output_tile: object = None,
           optional_output_tensor: Tensor | None = None, global_cb: object = None, sub_device_id: object = None,
           prefetcher_pipes: Sequence[object] = []) -> Tensor:
    return _matmul("matmul", input_tensor_a, input_tensor_b, None, transpose_a, transpose_b, memory_config, dtype,
                   program_config, activation, output_tile, optional_output_tensor)


def linear(input_tensor_a: Tensor, input_tensor_b: Tensor, *, bias: Tensor | None = None, transpose_a: bool = False,
           transpose_b: bool = False, memory_config: MemoryConfig | None = None, dtype: DataType | None = None,
           program_config: ProgramConfig | None = None, activation: Activation | None = None,
           compute_kernel_config: object = None, core_grid: CoreGrid | None = None, output_tile: object = None,
           optional_output_tensor: Tensor | None = None, global_cb: object = None, sub_device_id: object = None,
           prefetcher_pipes: Sequence[object] = [], in0_column_offset: int | None = None) -> Tensor:
    """``a @ b (+ bias)``, then the activation; ``b`` is stored ``[K, N]`` (torch's ``weight.T``)."""
    if in0_column_offset is not None:
        raise unsupported("linear", "in0_column_offset")
    return _matmul("linear", input_tensor_a, input_tensor_b, bias, transpose_a, transpose_b, memory_config, dtype,
                   program_config, activation, output_tile, optional_output_tensor)
