"""Tensor creation, conversion, placement and memory-config ops (``ttnn.from_torch`` and friends)."""

from __future__ import annotations

from typing import Sequence

import torch

from . import trace
from .device import MeshDevice
from .mesh import ConcatMesh2dToTensor, ConcatMeshToTensor, MeshTensor, ReplicateTensorToMesh
from .errors import TTFatal, check, unsupported
from .tensor import Tensor, quantize
from .types import (
    BLOCK_FLOAT_DTYPES, DRAM_MEMORY_CONFIG, BufferType, CoreCoord, CoreGrid, CoreRange, CoreRangeSet, DataType,
    Layout, MemoryConfig, ShardOrientation, ShardSpec, ShardStrategy, TensorMemoryLayout, TILE_SIZE,
)

_DTYPE_OF_TORCH = {
    torch.float32: DataType.FLOAT32,
    torch.bfloat16: DataType.BFLOAT16,
    torch.float16: DataType.BFLOAT16,
    torch.int32: DataType.INT32,
    torch.int64: DataType.UINT32,
    torch.uint32: DataType.UINT32,
    torch.uint8: DataType.UINT8,
    torch.int16: DataType.UINT16,
}

__all__ = [
    "copy_host_to_device_tensor",
    "from_torch",
    "to_torch",
    "to_device",
    "from_device",
    "to_layout",
    "typecast",
    "to_memory_config",
    "interleaved_to_sharded",
    "sharded_to_interleaved",
    "clone",
    "deallocate",
    "zeros",
    "ones",
    "full",
    "num_cores_to_corerangeset",
    "create_sharded_memory_config",
]


def from_torch(tensor: torch.Tensor | None, dtype: DataType | None = None, *, spec: object = None,
               tile: object = None, pad_value: float | None = None, layout: Layout | None = None,
               device: MeshDevice | None = None, memory_config: MemoryConfig | None = None,
               mesh_mapper: object = None, cq_id: int | None = None,
               preserve_nan_values: bool = False, col_tilize: bool = False,
               enable_bfloat_opt: bool = False) -> Tensor | None:
    if tensor is None:
        return None
    if spec is not None or tile is not None or col_tilize:
        raise unsupported("from_torch", "spec / tile / col_tilize")
    if dtype is None:
        if tensor.dtype not in _DTYPE_OF_TORCH:
            raise TypeError(f"from_torch: torch dtype {tensor.dtype} has no ttnn counterpart; pass dtype=")
        dtype = _DTYPE_OF_TORCH[tensor.dtype]
    if layout is None:
        layout = Layout.TILE if dtype in BLOCK_FLOAT_DTYPES else Layout.ROW_MAJOR
    check(not (dtype in BLOCK_FLOAT_DTYPES and layout != Layout.TILE), "from_torch",
          f"{dtype.name} is a tile format: it needs layout=TILE_LAYOUT")
    if memory_config is not None and device is None:
        raise TTFatal("from_torch: memory_config given without a device")
    signed_integers = not tensor.is_floating_point() and tensor.dtype.is_signed  # (torch.uint32 has no `<`)
    if dtype in (DataType.UINT32, DataType.UINT16, DataType.UINT8) and signed_integers:
        check(not bool((tensor < 0).any()), "from_torch", f"negative values cannot be stored as {dtype.name}")
    if device is not None:
        _check_not_capturing("from_torch")
    value = quantize(tensor.detach().to(torch.float32 if tensor.is_floating_point() else tensor.dtype), dtype)
    if mesh_mapper is None and device is not None and device.get_num_devices() > 1:
        mesh_mapper = ReplicateTensorToMesh(device)  # ttnn's default on a mesh
    if mesh_mapper is None:
        if value.data_ptr() == tensor.data_ptr():
            value = value.clone()  # the tensor owns its buffer: in-place ops must not reach the caller's torch tensor
        return _placed(value, dtype, layout, device, memory_config)
    # Each chip owns its buffer, replicated or not: in-place ops write one chip's copy.
    shards = [_placed(part.clone(memory_format=torch.contiguous_format), dtype, layout, device, memory_config)
              for part in mesh_mapper.shards(value)]
    return MeshTensor(shards, device) if len(shards) > 1 else shards[0]


def _placed(value: torch.Tensor, dtype: DataType, layout: Layout, device: MeshDevice | None,
            memory_config: MemoryConfig | None) -> Tensor:
    if device is not None and memory_config is not None and memory_config.is_sharded():
        _check_shard_fits(value.shape, memory_config, layout, "from_torch", device)
    return Tensor(value, dtype, layout, device, (memory_config or DRAM_MEMORY_CONFIG) if device is not None else None)


def to_torch(tensor: Tensor | MeshTensor, dtype: torch.dtype | None = None, *, torch_rank: int | None = None,
             mesh_composer: ConcatMeshToTensor | ConcatMesh2dToTensor | None = None,
             device: MeshDevice | None = None, cq_id: int | None = None) -> torch.Tensor:
    if not isinstance(tensor, (Tensor, MeshTensor)):
        raise TypeError(f"to_torch: expected a ttnn.Tensor, got {type(tensor).__name__}")
    shards = tensor.shards if isinstance(tensor, MeshTensor) else [tensor]
    check(all(s.value is not None for s in shards), "to_torch", "the tensor was deallocated")
    if tensor.device() is not None:
        _check_not_capturing("to_torch")
    if mesh_composer is not None:
        out = mesh_composer.compose([s.to_torch() for s in shards])
    else:
        check(len(shards) == 1, "to_torch", f"a tensor on {len(shards)} chips needs a mesh_composer")
        out = shards[0].to_torch()
    if torch_rank is not None:
        extra = out.dim() - torch_rank
        check(extra >= 0 and all(d == 1 for d in out.shape[:extra]), "to_torch",
              f"cannot squeeze shape {list(out.shape)} to rank {torch_rank}")
        out = out.reshape(out.shape[extra:])
    return out.to(dtype) if dtype is not None else out


def to_device(tensor: Tensor | MeshTensor, device: MeshDevice, memory_config: MemoryConfig | None = None, *,
              queue_id: object = None) -> Tensor | MeshTensor:
    _check_not_capturing("to_device")
    memory_config = memory_config or DRAM_MEMORY_CONFIG
    if memory_config.is_sharded():
        _check_shard_fits(tensor.shape, memory_config, tensor.layout, "to_device", device)
    chips = device.get_num_devices()
    shards = tensor.shards if isinstance(tensor, MeshTensor) else [tensor] * chips
    check(len(shards) == chips, "to_device", f"a tensor for {len(shards)} chips cannot go to a {chips}-chip mesh")
    placed = [Tensor(s.value.clone(), s.dtype, s.layout, device, memory_config) for s in shards]
    return MeshTensor(placed, device) if chips > 1 else placed[0]


def from_device(tensor: Tensor | MeshTensor, blocking: bool = True, *, queue_id: object = None) -> Tensor | MeshTensor:
    _check_not_capturing("from_device")
    return tensor.cpu()


def to_layout(tensor: Tensor, layout: Layout, dtype: DataType | None = None,
              memory_config: MemoryConfig | None = None, sub_core_grids: CoreRangeSet | None = None,
              pad_value: float = 0.0) -> Tensor:
    if dtype is None:
        # block floats exist only in tiles: leaving TILE makes them bfloat16
        dtype = DataType.BFLOAT16 if tensor.dtype in BLOCK_FLOAT_DTYPES and layout != Layout.TILE else tensor.dtype
    check(not (dtype in BLOCK_FLOAT_DTYPES and layout != Layout.TILE), "to_layout",
          f"{dtype.name} can only be in TILE layout")
    if tensor.device() is None:
        return Tensor(quantize(tensor.value, dtype), dtype, layout)
    if dtype == tensor.dtype:
        return tensor.moved(layout=layout, memory_config=memory_config)
    return tensor.like(tensor.value, dtype=dtype, layout=layout,
                       memory_config=memory_config or tensor.memory_config())


def typecast(input_tensor: Tensor, dtype: DataType, *, memory_config: MemoryConfig | None = None,
             output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    _check_on_device(input_tensor, "typecast")
    check(not (dtype in BLOCK_FLOAT_DTYPES and input_tensor.layout != Layout.TILE), "typecast",
          lambda: f"typecast to {dtype.name} needs a TILE tensor")
    value = input_tensor.value
    if input_tensor.is_float and dtype not in BLOCK_FLOAT_DTYPES and dtype not in (DataType.FLOAT32, DataType.BFLOAT16):
        value = value.round()
    out = input_tensor.like(value, dtype=dtype, memory_config=memory_config or input_tensor.memory_config())
    return _into(output_tensor, out)


def to_memory_config(tensor: Tensor, memory_config: MemoryConfig, dtype: DataType | None = None,
                     output_tensor: Tensor | None = None) -> Tensor:
    _check_on_device(tensor, "to_memory_config")
    if memory_config.is_sharded():
        _check_shard_fits(tensor.shape, memory_config, tensor.layout, "to_memory_config", tensor.device())
    if dtype is None or dtype == tensor.dtype:
        out = tensor.moved(memory_config=memory_config)
    else:
        out = tensor.like(tensor.value, dtype=dtype, memory_config=memory_config)
    return _into(output_tensor, out)


def interleaved_to_sharded(input_tensor: Tensor, sharded_memory_config: MemoryConfig,
                           output_dtype: DataType | None = None, *, keep_l1_aligned: bool = False,
                           preallocated_output: Tensor | None = None) -> Tensor:
    _check_on_device(input_tensor, "interleaved_to_sharded")
    check(not input_tensor.is_sharded(), "interleaved_to_sharded", "the input is already sharded")
    check(sharded_memory_config.is_sharded(), "interleaved_to_sharded", "the memory config is not sharded")
    return to_memory_config(input_tensor, sharded_memory_config, output_dtype, preallocated_output)


def sharded_to_interleaved(input_tensor: Tensor, memory_config: MemoryConfig | None = None,
                           output_dtype: DataType | None = None) -> Tensor:
    _check_on_device(input_tensor, "sharded_to_interleaved")
    check(input_tensor.is_sharded(), "sharded_to_interleaved", "the input is not sharded")
    memory_config = memory_config or DRAM_MEMORY_CONFIG
    if output_dtype is None or output_dtype == input_tensor.dtype:
        return input_tensor.moved(memory_config=memory_config)
    return input_tensor.like(input_tensor.value, dtype=output_dtype, memory_config=memory_config)


def clone(input: Tensor, *, dtype: DataType | None = None, memory_config: MemoryConfig | None = None,
          compute_kernel_config: object = None) -> Tensor:
    _check_on_device(input, "clone")
    if dtype is None or dtype == input.dtype:
        return input.moved(memory_config=memory_config)
    return input.like(input.value, dtype=dtype, memory_config=memory_config or input.memory_config())


def copy_host_to_device_tensor(host_tensor: Tensor | MeshTensor, device_tensor: Tensor | MeshTensor,
                               cq_id: int | None = None) -> None:
    """Overwrite a device tensor in place (how new inputs reach a captured trace); on a mesh chip by chip."""
    _check_not_capturing("copy_host_to_device_tensor")
    check(host_tensor.device() is None, "copy_host_to_device_tensor", "the source must be a host tensor")
    check(device_tensor.device() is not None, "copy_host_to_device_tensor", "the tensor must be on a device")
    check((host_tensor.shape, host_tensor.dtype, host_tensor.layout)
          == (device_tensor.shape, device_tensor.dtype, device_tensor.layout), "copy_host_to_device_tensor",
          f"host tensor {host_tensor} does not match device tensor {device_tensor}")
    targets = device_tensor.shards if isinstance(device_tensor, MeshTensor) else [device_tensor]
    sources = host_tensor.shards if isinstance(host_tensor, MeshTensor) else [host_tensor] * len(targets)
    check(len(sources) == len(targets), "copy_host_to_device_tensor",
          f"a host tensor for {len(sources)} chips cannot fill a tensor on {len(targets)}")
    for source, target in zip(sources, targets):
        target.value = source.value.clone()


def deallocate(tensor: Tensor, force: bool = True) -> None:
    # A trace keeps the buffers of the tensors it captured: the replay reads them.
    if not trace.capturing():
        tensor.deallocate(force)


def zeros(shape: Sequence[int], dtype: DataType | None = None, layout: Layout | None = None,
          device: MeshDevice | None = None, memory_config: MemoryConfig | None = None) -> Tensor:
    return full(shape, 0.0, dtype, layout, device, memory_config)


def ones(shape: Sequence[int], dtype: DataType | None = None, layout: Layout | None = None,
         device: MeshDevice | None = None, memory_config: MemoryConfig | None = None) -> Tensor:
    return full(shape, 1.0, dtype, layout, device, memory_config)


def full(shape: Sequence[int], fill_value: float, dtype: DataType | None = None, layout: Layout | None = None,
         device: MeshDevice | None = None, memory_config: MemoryConfig | None = None,
         optional_tensor: Tensor | None = None) -> Tensor:
    dtype = DataType.BFLOAT16 if dtype is None else dtype
    layout = Layout.ROW_MAJOR if layout is None else layout
    return from_torch(torch.full(tuple(shape), float(fill_value)), dtype, layout=layout, device=device,
                      memory_config=memory_config if device is not None else None)


# --- sharding helpers ---------------------------------------------------------------------------

def num_cores_to_corerangeset(target_num_cores: int, grid_size: CoreCoord, row_wise: bool = False) -> CoreRangeSet:
    """The first ``target_num_cores`` cores of the grid, row by row (or column by column), as ttnn orders them."""
    check(target_num_cores <= grid_size.x * grid_size.y, "num_cores_to_corerangeset",
          f"{target_num_cores} cores do not fit a {grid_size.x}x{grid_size.y} grid")
    ranges = []
    if row_wise:
        full_rows, rest = divmod(target_num_cores, grid_size.x)
        if full_rows:
            ranges.append(CoreRange(CoreCoord(0, 0), CoreCoord(grid_size.x - 1, full_rows - 1)))
        if rest:
            ranges.append(CoreRange(CoreCoord(0, full_rows), CoreCoord(rest - 1, full_rows)))
    else:
        full_cols, rest = divmod(target_num_cores, grid_size.y)
        if full_cols:
            ranges.append(CoreRange(CoreCoord(0, 0), CoreCoord(full_cols - 1, grid_size.y - 1)))
        if rest:
            ranges.append(CoreRange(CoreCoord(full_cols, 0), CoreCoord(full_cols, rest - 1)))
    return CoreRangeSet(ranges)


def create_sharded_memory_config(shape: Sequence[int], core_grid: CoreGrid | CoreRangeSet, strategy: ShardStrategy,
                                 orientation: ShardOrientation | None = None,
                                 use_height_and_width_as_shard_shape: bool = False) -> MemoryConfig:
    """A sharded L1 memory config, with the shard shape worked out as ``ttnn.create_sharded_memory_config`` does."""
    if isinstance(core_grid, CoreGrid):
        grid = CoreRangeSet([CoreRange(CoreCoord(0, 0), CoreCoord(core_grid.x - 1, core_grid.y - 1))])
        rows, cols = core_grid.y, core_grid.x
    else:
        grid = core_grid
        box = grid.bounding_box()
        rows, cols = box.end.y - box.start.y + 1, box.end.x - box.start.x + 1
    orientation = orientation or ShardOrientation.ROW_MAJOR
    dims = list(shape)
    height = 1
    for d in dims[:-1]:
        height *= d
    width = dims[-1]
    layout = {ShardStrategy.HEIGHT: TensorMemoryLayout.HEIGHT_SHARDED,
              ShardStrategy.WIDTH: TensorMemoryLayout.WIDTH_SHARDED,
              ShardStrategy.BLOCK: TensorMemoryLayout.BLOCK_SHARDED}[strategy]
    if use_height_and_width_as_shard_shape:
        shard = (dims[-2], dims[-1])
    else:
        n = grid.num_cores()
        if strategy == ShardStrategy.HEIGHT:
            shard = (-(-height // n), width)
        elif strategy == ShardStrategy.WIDTH:
            shard = (height, -(-width // n))
        else:
            if orientation == ShardOrientation.COL_MAJOR:
                rows, cols = cols, rows
            shard = (-(-height // rows), -(-width // cols))
        shard = (-(-shard[0] // TILE_SIZE) * TILE_SIZE, -(-shard[1] // TILE_SIZE) * TILE_SIZE)
    return MemoryConfig(layout, BufferType.L1, ShardSpec(grid, shard, orientation))


def _check_shard_fits(shape: Sequence[int], memory_config: MemoryConfig, layout: Layout, op: str,
                      device: MeshDevice) -> None:
    spec = memory_config.shard_spec
    check(spec is not None, op, "a sharded memory config needs a shard spec")
    dram = memory_config.buffer_type == BufferType.DRAM
    banks = device.dram_grid_size() if dram else device.compute_with_storage_grid_size()
    box = spec.grid.bounding_box()
    outside = [] if box.end.x < banks.x and box.end.y < banks.y else sorted(spec.grid.core_set(),
                                                                            key=lambda c: (c.y, c.x))
    for core in outside:
        check(core.x < banks.x and core.y < banks.y, op,
              lambda: f"Invalid shard grid: shard core ({core.x}, {core.y}) has no {'DRAM' if dram else 'L1'} bank "
                      f"on this device, which has {banks.x * banks.y} of them")
    dims = list(shape)
    height = 1
    for d in dims[:-1]:
        height *= d
    width = dims[-1]
    if layout == Layout.TILE:
        check(spec.shape[0] % TILE_SIZE == 0 and spec.shape[1] % TILE_SIZE == 0, op,
              lambda: f"shard shape {spec.shape} is not a multiple of the 32x32 tile")
    cores = spec.num_cores()
    if memory_config.memory_layout == TensorMemoryLayout.HEIGHT_SHARDED:
        check(spec.shape[1] >= width, op, lambda: f"height-sharded shard width {spec.shape[1]} < tensor width {width}")
        check(spec.shape[0] * cores >= height, op,
              lambda: f"{cores} shards of height {spec.shape[0]} cannot hold height {height}")
    elif memory_config.memory_layout == TensorMemoryLayout.WIDTH_SHARDED:
        check(spec.shape[1] * cores >= width, op,
              lambda: f"{cores} shards of width {spec.shape[1]} cannot hold width {width}")


def _check_on_device(tensor: Tensor, op: str) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a ttnn.Tensor, got {type(tensor).__name__}")
    check(tensor.device() is not None, op, "the tensor must be on a device")


def _check_not_capturing(op: str) -> None:
    check(not trace.capturing(), op, "host/device transfers are not allowed during trace capture")


def _into(output_tensor: Tensor | None, result: Tensor) -> Tensor:
    """Honour ttnn's ``output_tensor=`` (preallocated output): copy the result into it."""
    if output_tensor is None:
        return result
    check(tuple(output_tensor.shape) == tuple(result.shape), "output_tensor",
          lambda: f"preallocated output has shape {list(output_tensor.shape)}, the result {list(result.shape)}")
    same = result.dtype == output_tensor.dtype
    output_tensor.value = result.value if same else quantize(result.value, output_tensor.dtype, device_packer=True)
    return output_tensor
