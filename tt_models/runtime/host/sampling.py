"""Token selection ops: ``argmax``, ``topk``, ``gather``, ``sampling`` and the per-core PRNGs of ``manual_seed``.

``ttnn.sampling`` runs one core per user row; each core draws its random number from its own PRNG, which
``ttnn.manual_seed`` seeds (one seed for every core, or ``seeds[i]`` for core ``user_ids[i]``) and which
advances with every draw. A ``seed`` given to ``sampling`` itself reseeds every core first. The host backend
keeps one ``torch.Generator`` per (device, chip, core) for this.
"""

from __future__ import annotations

import torch

from .core import _check_on_device, _into
from .device import MeshDevice
from .errors import check
from .mesh import current_chip
from .tensor import Tensor
from .types import CoreRangeSet, DataType, Layout, MemoryConfig

__all__ = ["argmax", "topk", "gather", "sampling", "manual_seed"]

_USERS = 32  # ttnn.sampling: one core per user, at most 32
_prngs: dict[tuple[int, int, int], torch.Generator] = {}


def argmax(input_tensor: Tensor, dim: int | None = None, keepdim: bool = False, *,
           sub_core_grids: CoreRangeSet | None = None, memory_config: MemoryConfig | None = None,
           output_tensor: Tensor | None = None, enable_secondary_dm: bool | None = None) -> Tensor:
    """Index of the first maximum (UINT32, ROW_MAJOR)."""
    _check_on_device(input_tensor, "argmax")
    rank = len(input_tensor.shape)
    check(dim is not None or input_tensor.layout == Layout.ROW_MAJOR, "argmax", "dim=None needs a ROW_MAJOR input")
    check(not input_tensor.is_sharded(), "argmax", "sharded inputs are not supported")
    if dim is not None and dim % rank != rank - 1 or input_tensor.layout == Layout.TILE:
        check(input_tensor.is_float, "argmax", f"{input_tensor.dtype.name} input needs a ROW_MAJOR last-dim reduction")
    values = input_tensor.float() if input_tensor.is_float else input_tensor.value.to(torch.float64)
    index = values.flatten().argmax() if dim is None else values.argmax(dim=dim, keepdim=keepdim)
    out = input_tensor.like(index.to(torch.int64), dtype=DataType.UINT32, layout=Layout.ROW_MAJOR,
                            memory_config=memory_config or input_tensor.memory_config())
    return _into(output_tensor, out)


def topk(input_tensor: Tensor, k: int = 32, dim: int = -1, largest: bool = True, sorted: bool = True, *,
         memory_config: MemoryConfig | None = None, sub_core_grids: CoreRangeSet | None = None,
         indices_tensor: Tensor | None = None, output_tensor: tuple[Tensor, Tensor] | None = None,
         stable: bool = False) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) values and their indices (TILE). Ties keep the lower index first (the
    order ``stable=True`` guarantees on Wormhole and Blackhole). Indices are UINT16 unless the tile-padded
    dimension exceeds 65536 or the input is float32 (then UINT32), or ``indices_tensor`` supplies labels."""
    _check_on_device(input_tensor, "topk")
    check(input_tensor.layout == Layout.TILE, "topk", "the input must be in TILE layout")
    check(input_tensor.dtype in (DataType.BFLOAT16, DataType.BFLOAT8_B, DataType.FLOAT32), "topk",
          f"unsupported input dtype {input_tensor.dtype.name}")
    check(not (stable and indices_tensor is not None), "topk", "stable=True cannot be combined with indices_tensor")
    width = input_tensor.shape[dim]
    check(1 <= k <= width, "topk", f"k={k} outside 1..{width}")
    values = input_tensor.float()
    order = _stable_top(values, k, dim, largest)
    top = values.gather(dim, order)
    labels = order if indices_tensor is None else indices_tensor.value.to(torch.int64).gather(dim, order)
    wide = input_tensor.padded_shape[dim] > 65536 or input_tensor.dtype == DataType.FLOAT32
    index_dtype = indices_tensor.dtype if indices_tensor is not None else (
        DataType.UINT32 if wide else DataType.UINT16)
    memory_config = memory_config or input_tensor.memory_config()
    out = (input_tensor.like(top, memory_config=memory_config),
           input_tensor.like(labels, dtype=index_dtype, memory_config=memory_config))
    if output_tensor is not None:
        return _into(output_tensor[0], out[0]), _into(output_tensor[1], out[1])
    return out


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False,
           memory_config: MemoryConfig | None = None, out: Tensor | None = None,
           sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    """``input`` at ``index`` along ``dim`` (``torch.gather``); TILE operands, UINT16/UINT32 indices."""
    _check_on_device(input, "gather")
    _check_on_device(index, "gather")
    check(input.layout == Layout.TILE and index.layout == Layout.TILE, "gather", "input and index must be TILE")
    check(index.dtype in (DataType.UINT16, DataType.UINT32), "gather", f"index dtype {index.dtype.name}")
    check(len(input.shape) == len(index.shape), "gather", "input and index must have the same rank")
    check(not sparse_grad, "gather", "sparse_grad is not supported")
    result = input.value.gather(dim, index.value.to(torch.int64))
    return _into(out, input.like(result, memory_config=memory_config or input.memory_config()))


def manual_seed(seeds: int | Tensor = 0, *, device: MeshDevice | None = None, user_ids: int | Tensor | None = None,
                sub_core_grids: CoreRangeSet | None = None) -> None:
    """Seed the PRNG of every core, of core ``user_ids``, or of core ``user_ids[i]`` with ``seeds[i]``."""
    if isinstance(seeds, Tensor):
        _check_on_device(seeds, "manual_seed")
        check(seeds.dtype == DataType.UINT32 and seeds.layout == Layout.ROW_MAJOR, "manual_seed",
              "seeds must be a UINT32 ROW_MAJOR tensor")
        check(isinstance(user_ids, Tensor) and user_ids.shape == seeds.shape, "manual_seed",
              "a seeds tensor needs a user_ids tensor of the same shape")
        device = seeds.device()
        pairs = zip(user_ids.value.flatten().tolist(), seeds.value.flatten().tolist())
    else:
        check(device is not None or isinstance(user_ids, Tensor), "manual_seed", "a scalar seed needs device=")
        users = range(_USERS) if user_ids is None else (
            user_ids.value.flatten().tolist() if isinstance(user_ids, Tensor) else [user_ids])
        device = device or user_ids.device()
        pairs = ((u, seeds) for u in users)
    # Called with device=, not with mesh tensors, the seeds reach every chip of the mesh.
    chips = [current_chip()] if isinstance(seeds, Tensor) or isinstance(user_ids, Tensor) else range(
        device.get_num_devices())
    for user, seed in pairs:
        check(0 <= user < _USERS, "manual_seed", f"user id {user} outside 0..{_USERS - 1}")
        for chip in chips:
            _prng(device, int(user), chip).manual_seed(int(seed))


def sampling(input_values_tensor: Tensor, input_indices_tensor: Tensor, k: Tensor, p: Tensor, temp: Tensor, *,
             seed: int | None = None, sub_core_grids: CoreRangeSet | None = None,
             output_tensor: Tensor | None = None) -> Tensor:
    """Per user row ``u`` of ``[1, 1, U, W]`` candidates: the softmax of the ``k[u]`` largest ``values * temp[u]``
    (``temp`` holds 1/T; the kernel masks the others before its softmax, so top-p sees the top-k's mass, as vLLM
    does), then the shortest prefix whose probability mass reaches ``p[u]`` (at least one), draw ``r`` from core
    ``u``'s PRNG and return ``indices[u, j]`` for the first ``j`` whose renormalised cumulative probability exceeds
    ``r``. Output ``[1, 1, 1, U]`` UINT32 ROW_MAJOR."""
    op = "sampling"
    for t in (input_values_tensor, input_indices_tensor, k, p, temp):
        _check_on_device(t, op)
    values, indices = input_values_tensor, input_indices_tensor
    check(values.dtype == DataType.BFLOAT16 and values.layout == Layout.TILE, op, "values must be BFLOAT16 TILE")
    check(indices.dtype in (DataType.UINT32, DataType.INT32) and indices.layout == Layout.ROW_MAJOR, op,
          "indices must be UINT32/INT32 ROW_MAJOR")
    check(tuple(values.shape) == tuple(indices.shape), op, "values and indices must have the same shape")
    n, c, users, width = values.shape
    check(n == 1 and c == 1 and 1 <= users <= _USERS, op, f"values must be [1, 1, 1..{_USERS}, W], got {values.shape}")
    tiles = values.padded_shape[-1] // 32
    check(tiles & (tiles - 1) == 0, op, f"W / 32 = {tiles} tiles must be a power of 2")
    check(k.dtype in (DataType.UINT32, DataType.INT32) and k.layout == Layout.ROW_MAJOR, op, "k must be UINT32/INT32")
    for name, t in (("p", p), ("temp", temp)):
        check(t.dtype == DataType.BFLOAT16 and t.layout == Layout.ROW_MAJOR, op, f"{name} must be BFLOAT16 ROW_MAJOR")
    for name, t in (("k", k), ("p", p), ("temp", temp)):
        check(tuple(t.shape) == (users,), op, f"{name} must have shape [{users}]")
    top_k = k.value.to(torch.int64)
    check(bool(((top_k > 0) & (top_k <= 32)).all()), op, "k must be in (0, 32]")
    top_p = p.float()
    check(bool(((top_p >= 0) & (top_p <= 1)).all()), op, "p must be in [0, 1]")
    device = values.device()
    if seed is not None:
        manual_seed(seed, device=device)
    scaled = values.float()[0, 0] * temp.float()[:, None]
    order = torch.sort(scaled, dim=-1, descending=True, stable=True)
    position = torch.arange(width)[None, :]
    in_top_k = position < top_k[:, None]
    sorted_probs = torch.softmax(torch.where(in_top_k, order.values, -torch.inf), dim=-1)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass of the better candidates
    keep = in_top_k & ((before < top_p[:, None]) | (position == 0))
    kept = torch.where(keep, sorted_probs, 0.0)
    cumulative = torch.cumsum(kept / kept.sum(-1, keepdim=True), dim=-1)
    draws = torch.stack([torch.rand((), generator=_prng(device, u)) for u in range(users)])
    choice = torch.minimum((cumulative <= draws[:, None]).sum(-1), keep.sum(-1) - 1)
    labels = indices.value.to(torch.int64)[0, 0].gather(1, order.indices).gather(1, choice[:, None])
    out = indices.like(labels.reshape(1, 1, 1, users), dtype=output_tensor.dtype if output_tensor else indices.dtype,
                       memory_config=values.memory_config())
    return _into(output_tensor, out)


def _stable_top(values: torch.Tensor, k: int, dim: int, largest: bool) -> torch.Tensor:
    """Indices of the ``k`` best values, ties to the lower index: a stable sort of ``2k`` candidates from
    ``torch.topk`` (whose tie order is unspecified), or of the whole row when ties reach past them."""
    candidates = min(values.shape[dim], 2 * k)
    picked = torch.topk(values, candidates, dim=dim, largest=largest, sorted=False).indices.sort(dim).values
    picked_values = values.gather(dim, picked)
    order = torch.sort(picked_values, dim=dim, descending=largest, stable=True).indices.narrow(dim, 0, k)
    kth = picked_values.gather(dim, order.narrow(dim, k - 1, 1))
    reaching = (values >= kth) if largest else (values <= kth)  # every value as good as the k-th
    if bool((reaching.sum(dim) > candidates).any()):
        return torch.sort(values, dim=dim, descending=largest, stable=True).indices.narrow(dim, 0, k)
    return picked.gather(dim, order)


def _prng(device: MeshDevice, user: int, chip: int | None = None) -> torch.Generator:
    """Core ``user``'s PRNG on the chip running the op (``chip``: another one)."""
    key = (device.id(), current_chip() if chip is None else chip, user)
    if key not in _prngs:
        _prngs[key] = torch.Generator().manual_seed(user)
    return _prngs[key]
