"""softmax, rms_norm and layer_norm, with their program configs (performance-only: the math ignores them, but a
sharded norm's layout is checked as the real op checks it)."""

from __future__ import annotations

import torch

from .core import _check_on_device
from .errors import check
from .tensor import Tensor
from .types import TILE_SIZE, CoreCoord, DataType, Layout, MemoryConfig, TensorMemoryLayout

__all__ = [
    "SoftmaxDefaultProgramConfig",
    "SoftmaxShardedMultiCoreProgramConfig",
    "LayerNormDefaultProgramConfig",
    "LayerNormShardedMultiCoreProgramConfig",
    "softmax",
    "softmax_in_place",
    "rms_norm",
    "layer_norm",
]

_NORM_DTYPES = (DataType.BFLOAT16, DataType.FLOAT32, DataType.BFLOAT8_B)


class SoftmaxDefaultProgramConfig:
    pass


class SoftmaxShardedMultiCoreProgramConfig:
    def __init__(self, *, compute_with_storage_grid_size: CoreCoord, subblock_w: int, block_h: int,
                 block_w: int) -> None:
        self.compute_with_storage_grid_size = compute_with_storage_grid_size
        self.subblock_w = subblock_w
        self.block_h = block_h
        self.block_w = block_w


class LayerNormDefaultProgramConfig:
    def __init__(self, *, legacy_reduction: bool = False, legacy_rsqrt: bool = False,
                 use_welford: bool = False) -> None:
        self.legacy_reduction = legacy_reduction
        self.legacy_rsqrt = legacy_rsqrt
        self.use_welford = use_welford


class LayerNormShardedMultiCoreProgramConfig:
    def __init__(self, *, compute_with_storage_grid_size: CoreCoord, subblock_w: int, block_h: int, block_w: int,
                 inplace: bool, legacy_reduction: bool = False, legacy_rsqrt: bool = False,
                 use_welford: bool = False) -> None:
        self.compute_with_storage_grid_size = compute_with_storage_grid_size
        self.subblock_w = subblock_w
        self.block_h = block_h
        self.block_w = block_w
        self.inplace = inplace
        self.legacy_reduction = legacy_reduction
        self.legacy_rsqrt = legacy_rsqrt
        self.use_welford = use_welford


def _check_input(op: str, input_tensor: Tensor) -> None:
    _check_on_device(input_tensor, op)
    check(input_tensor.layout == Layout.TILE, op, "the input must be in TILE layout")
    check(input_tensor.dtype in _NORM_DTYPES, op, lambda: f"unsupported input dtype {input_tensor.dtype.name}")


def _softmax_values(op: str, input_tensor: Tensor, dim: int) -> torch.Tensor:
    _check_input(op, input_tensor)
    rank = len(input_tensor.shape)
    check(-rank <= dim < rank, op, f"dim {dim} is out of range for rank {rank}")
    return torch.softmax(input_tensor.float(), dim=dim)


def softmax(input_tensor: Tensor, dim: int = -1, *, memory_config: MemoryConfig | None = None,
            compute_kernel_config: object = None, numeric_stable: bool = True) -> Tensor:
    values = _softmax_values("softmax", input_tensor, dim)
    return input_tensor.like(values, memory_config=memory_config or input_tensor.memory_config())


def softmax_in_place(input_tensor: Tensor, dim: int = -1, *,
                     program_config: SoftmaxDefaultProgramConfig | SoftmaxShardedMultiCoreProgramConfig
                     = SoftmaxDefaultProgramConfig(), compute_kernel_config: object = None,
                     numeric_stable: bool = True) -> Tensor:
    """Softmax written back into ``input_tensor`` (which is returned)."""
    values = _softmax_values("softmax_in_place", input_tensor, dim)
    input_tensor.value = input_tensor.like(values, memory_config=input_tensor.memory_config()).value
    return input_tensor


def _affine(op: str, name: str, param: Tensor | None, input_tensor: Tensor) -> torch.Tensor | None:
    """gamma / beta as a vector of the input's width. ROW_MAJOR ones come as ``[..., W/32, 32]`` sticks."""
    if param is None:
        return None
    _check_on_device(param, op)
    width, padded_width = input_tensor.shape[-1], input_tensor.padded_shape[-1]
    if param.layout == Layout.TILE:
        check(param.padded_shape[-1] == padded_width and param.padded_shape[-2] == TILE_SIZE
              and param.volume() == param.shape[-1], op,
              lambda: f"TILE {name} must be one row as wide as the input ({padded_width} padded), got "
                      f"{list(param.shape)}")
    else:
        check(param.shape[-1] == TILE_SIZE and param.volume() == padded_width, op,
              lambda: f"ROW_MAJOR {name} must be [..., {padded_width // TILE_SIZE}, {TILE_SIZE}], got "
                      f"{list(param.shape)}")
    return param.float().reshape(-1)[:width]


def _check_sharded_program(op: str, input_tensor: Tensor, memory_config: MemoryConfig | None,
                           program_config: LayerNormShardedMultiCoreProgramConfig) -> None:
    check(input_tensor.is_sharded(), op, "a sharded program config needs a sharded input")
    spec = input_tensor.memory_config().shard_spec
    if memory_config is not None:
        check(input_tensor.memory_config().buffer_type == memory_config.buffer_type, op,
              "the input and output must be in the same buffer type")
    k_tiles = input_tensor.padded_shape[-1] // TILE_SIZE
    if input_tensor.memory_config().memory_layout == TensorMemoryLayout.WIDTH_SHARDED:
        check(-(-k_tiles // spec.num_cores()) == program_config.block_w, op,
              lambda: f"block_w ({program_config.block_w}) must equal to K (in tiles) / num_cores ({spec.num_cores()})")


def _norm(op: str, input_tensor: Tensor, epsilon: float, weight: Tensor | None, bias: Tensor | None,
          residual_input_tensor: Tensor | None, memory_config: MemoryConfig | None, center: bool,
          program_config: object = None) -> Tensor:
    _check_input(op, input_tensor)
    if isinstance(program_config, LayerNormShardedMultiCoreProgramConfig):
        _check_sharded_program(op, input_tensor, memory_config, program_config)
    check(not (input_tensor.is_sharded()
               and input_tensor.memory_config().memory_layout == TensorMemoryLayout.HEIGHT_SHARDED), op,
          "height-sharded inputs are not supported")
    x = input_tensor.float()
    if residual_input_tensor is not None:
        _check_input(op, residual_input_tensor)
        check(residual_input_tensor.padded_shape == input_tensor.padded_shape, op,
              lambda: f"residual padded shape {list(residual_input_tensor.padded_shape)} != input padded shape "
                      f"{list(input_tensor.padded_shape)}")
        x = x + residual_input_tensor.float().reshape(x.shape)
    gamma = _affine(op, "weight", weight, input_tensor)
    beta = _affine(op, "bias", bias, input_tensor)
    if center:
        x = x - x.mean(-1, keepdim=True)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return input_tensor.like(y, memory_config=memory_config or input_tensor.memory_config())


def rms_norm(input_tensor: Tensor, *, epsilon: float = 1e-12, weight: Tensor | None = None,
             bias: Tensor | None = None, residual_input_tensor: Tensor | None = None,
             memory_config: MemoryConfig | None = None,
             program_config: LayerNormDefaultProgramConfig | LayerNormShardedMultiCoreProgramConfig | None = None,
             compute_kernel_config: object = None) -> Tensor:
    """``(x + residual) * rsqrt(mean((x + residual)^2) + epsilon) * weight + bias`` over the last dim.

    The default epsilon (1e-12) is ttnn's, not the model's: callers pass theirs.
    """
    return _norm("rms_norm", input_tensor, epsilon, weight, bias, residual_input_tensor, memory_config, False,
                 program_config)


def layer_norm(input_tensor: Tensor, *, epsilon: float = 1e-12, weight: Tensor | None = None,
               bias: Tensor | None = None, residual_input_tensor: Tensor | None = None,
               memory_config: MemoryConfig | None = None,
               program_config: LayerNormDefaultProgramConfig | LayerNormShardedMultiCoreProgramConfig | None = None,
               compute_kernel_config: object = None, recip_tensor: Tensor | None = None) -> Tensor:
    return _norm("layer_norm", input_tensor, epsilon, weight, bias, residual_input_tensor, memory_config, True,
                 program_config)
