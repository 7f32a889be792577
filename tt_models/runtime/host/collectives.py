"""The collectives over a mesh's chips (``ttnn.all_gather``, ``ttnn.reduce_scatter``, ``ttnn.all_reduce``), and
``ttnn.mesh_partition``, which keeps each chip's own slice of a replicated tensor.

Each runs independently within the groups of chips along ``cluster_axis`` (each row of the mesh for axis 1, each
column for axis 0), or over all chips when it is None, which a 2D mesh refuses as the real ops do on a 1D fabric.
Gathers move values exactly. Sums add the chips' values one at a time in ring order, starting at the chip after the
one that keeps the result, each partial sum rounded to the tensor's dtype (bfloat8_b partials with the device packer):
the device adds a received partial to its own slice with an eltwise kernel that packs its output in that dtype.
``all_reduce`` upcasts block-float inputs and sums in bfloat16, as its documentation states. Routing options
(links, topology, workers) change speed, not values, and are accepted as the real ops accept them.
"""

from __future__ import annotations

import torch

from .errors import check
from .mesh import MeshTensor
from .tensor import Tensor, quantize
from .types import BLOCK_FLOAT_DTYPES, DataType, MemoryConfig, TILE_SIZE, Layout

__all__ = ["all_gather", "reduce_scatter", "all_reduce", "mesh_partition"]


def _groups(tensor: MeshTensor, cluster_axis: int | None, op: str) -> list[list[int]]:
    """The chip indices of each group, in ring order."""
    check(isinstance(tensor, MeshTensor) and tensor.device() is not None, op,
          "the input must be a tensor on a mesh of more than one chip")
    rows, cols = tuple(tensor.device().shape)
    if cluster_axis is None:
        check(rows == 1 or cols == 1, op, f"a {rows}x{cols} mesh (1D fabric on a 2D mesh_device) requires "
                                          "cluster_axis to be set")
        return [list(range(rows * cols))]
    check(cluster_axis in (0, 1), op, f"cluster_axis must be 0 or 1, got {cluster_axis}")
    if cluster_axis == 1:
        return [[r * cols + c for c in range(cols)] for r in range(rows)]
    return [[r * cols + c for r in range(rows)] for c in range(cols)]


def _ring_sum(values: list[torch.Tensor], keeper: int, dtype: DataType) -> torch.Tensor:
    """The sum of ``values`` added one chip at a time from the chip after ``keeper``, rounded at each step."""
    n = len(values)
    order = [(keeper + 1 + i) % n for i in range(n)]
    total = values[order[0]]
    for i in order[1:]:
        total = quantize(total + values[i], dtype, device_packer=True)
    return total


def _output(source: Tensor, values: torch.Tensor, memory_config: MemoryConfig | None, dtype: DataType) -> Tensor:
    return Tensor(quantize(values, dtype, device_packer=True), dtype, source.layout, source.device(),
                  memory_config or source.memory_config())


def all_gather(input_tensor: MeshTensor, dim: int, *, cluster_axis: int | None = None,
               memory_config: MemoryConfig | None = None, output_tensor: MeshTensor | None = None,
               subdevice_id: object = None, sub_core_grids: object = None, num_links: int | None = None,
               topology: object = None, chunks_per_sync: int | None = None, num_workers_per_link: int | None = None,
               num_buffers_per_channel: int | None = None, use_l1_small_for_semaphores: bool = False) -> MeshTensor:
    """Every chip of a group gets the group's tensors concatenated along ``dim`` (in group order)."""
    groups = _groups(input_tensor, cluster_axis, "all_gather")
    check(output_tensor is None, "all_gather", "output_tensor is not supported by the host backend")
    shards = list(input_tensor.shards)
    out: list[Tensor | None] = [None] * len(shards)
    for group in groups:
        gathered = torch.cat([shards[i].value for i in group], dim=dim)
        for i in group:
            out[i] = Tensor(gathered.clone(), shards[i].dtype, shards[i].layout, shards[i].device(),
                            memory_config or shards[i].memory_config())
    return MeshTensor(out, input_tensor.device())


def reduce_scatter(input_tensor: MeshTensor, dim: int, *, cluster_axis: int | None = None, subdevice_id: object = None,
                   memory_config: MemoryConfig | None = None, intermediate_memory_config: MemoryConfig | None = None,
                   output_tensor: MeshTensor | None = None, num_links: int | None = None, topology: object = None,
                   chunks_per_sync: int | None = None, num_workers_per_link: int | None = None,
                   num_buffers_per_channel: int | None = None, compute_kernel_config: object = None,
                   use_l1_small_for_semaphores: bool = False) -> MeshTensor:
    """Chip ``k`` of a group gets slice ``k`` along ``dim`` of the group's sum."""
    groups = _groups(input_tensor, cluster_axis, "reduce_scatter")
    check(output_tensor is None, "reduce_scatter", "output_tensor is not supported by the host backend")
    shards = list(input_tensor.shards)
    size = input_tensor.shape[dim]
    n = len(groups[0])
    tiled = input_tensor.layout == Layout.TILE and dim % len(input_tensor.shape) >= len(input_tensor.shape) - 2
    unit = n * (TILE_SIZE if tiled else 1)
    check(size % unit == 0, "reduce_scatter", f"dim {dim} of size {size} does not split into {n} equal slices"
          + (f" of whole {TILE_SIZE}-wide tiles" if tiled else ""))
    dtype = input_tensor.dtype
    out: list[Tensor | None] = [None] * len(shards)
    for group in groups:
        parts = [shards[i].float().chunk(n, dim) for i in group]
        for k, i in enumerate(group):
            out[i] = _output(shards[i], _ring_sum([p[k] for p in parts], k, dtype), memory_config, dtype)
    return MeshTensor(out, input_tensor.device())


def all_reduce(input_tensor: MeshTensor, *, cluster_axis: int | None = None, subdevice_id: object = None,
               memory_config: MemoryConfig | None = None, num_links: int | None = None,
               topology: object = None) -> MeshTensor:
    """Every chip of a group gets the group's sum (summed in bfloat16; block floats are upcast first)."""
    groups = _groups(input_tensor, cluster_axis, "all_reduce")
    shards = list(input_tensor.shards)
    dtype = input_tensor.dtype
    sum_dtype = DataType.BFLOAT16 if dtype in BLOCK_FLOAT_DTYPES else dtype
    out: list[Tensor | None] = [None] * len(shards)
    for group in groups:
        values = [shards[i].float() for i in group]
        for k, i in enumerate(group):
            out[i] = _output(shards[i], _ring_sum(values, k, sum_dtype), memory_config, dtype)
    return MeshTensor(out, input_tensor.device())


def mesh_partition(input_tensor: MeshTensor, dim: int, cluster_axis: int | None = None, *,
                   memory_config: MemoryConfig | None = None) -> MeshTensor:
    """Chip ``k`` of a group keeps slice ``k`` along ``dim`` of its own tensor (no data crosses chips)."""
    groups = _groups(input_tensor, cluster_axis, "mesh_partition")
    shards = list(input_tensor.shards)
    n = len(groups[0])
    size = input_tensor.shape[dim]
    check(size % n == 0, "mesh_partition", f"dim {dim} of size {size} does not split into {n} equal slices")
    out: list[Tensor | None] = [None] * len(shards)
    for group in groups:
        for k, i in enumerate(group):
            part = shards[i].value.chunk(n, dim)[k].clone(memory_format=torch.contiguous_format)
            out[i] = Tensor(part, shards[i].dtype, shards[i].layout, shards[i].device(),
                            memory_config or shards[i].memory_config())
    return MeshTensor(out, input_tensor.device())
