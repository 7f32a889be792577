"""Tensor parallelism over the chips of a replica's (sub)mesh, as tt_transformers runs every model beyond one chip.

The residual stream is *fractured*: each chip holds ``dim / N`` of its columns. A norm all-gathers its input and
runs on the whole row (replicated output); column-parallel matmuls (QKV, MLP up/gate, cross K/V, LM head by
vocabulary) read that replicated input and keep their outputs split; row-parallel matmuls (attention output, MLP
down) produce partial sums that a reduce-scatter adds and splits back into the fractured residual. So a layer costs
two all-gathers and two reduce-scatters, the pattern of tt_transformers' 1xN decoder (an all-reduce moves the same
bytes as the pair, and the fractured residual makes the adds and the residual N times smaller).

Attention heads split over the chips with their KV heads. With fewer KV heads than chips a KV head is replicated on
``N / n_kv`` chips (``max(1, n_kv // N)`` per chip, the per-chip shape TT vLLM passes to ``allocate_kv_cache``),
each holding a share of its query group; a group that does not split evenly is padded with zero query heads, whose
output rows of the attention output weight are zero (Qwen2.5-7B's 7 query heads per KV head on a T3K: 4 per chip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_models.runtime import ttnn

TILE = 32


def whole_tiles(n: int) -> int:
    """``n`` rounded up to whole 32-wide tiles."""
    return -(-n // TILE) * TILE


def chips(device: Any) -> int:
    return device.get_num_devices()


@dataclass(frozen=True)
class HeadSplit:
    """Which query and KV heads each of ``chips`` chips holds."""

    n_heads: int
    n_kv_heads: int
    chips: int

    @classmethod
    def of(cls, n_heads: int, n_kv_heads: int, chips: int) -> "HeadSplit":
        if n_heads % n_kv_heads:
            raise ValueError(f"{n_heads} query heads do not form groups over {n_kv_heads} KV heads")
        if n_kv_heads % chips and chips % n_kv_heads:
            raise ValueError(f"{n_kv_heads} KV heads cannot split over {chips} chips: one count must divide the "
                             f"other (a mesh of {', '.join(str(c) for c in _usable(n_kv_heads))} chips can)")
        return cls(n_heads, n_kv_heads, chips)

    @property
    def kv_per_chip(self) -> int:
        return max(1, self.n_kv_heads // self.chips)

    @property
    def chips_per_kv(self) -> int:
        """Chips sharing one KV head (1 unless there are fewer KV heads than chips)."""
        return max(1, self.chips // self.n_kv_heads)

    @property
    def q_per_chip(self) -> int:
        group = self.n_heads // self.n_kv_heads
        return -(-group // self.chips_per_kv) * self.kv_per_chip

    @property
    def padded(self) -> bool:
        return self.q_per_chip * self.chips > self.n_heads

    def kv_heads(self, chip: int) -> list[int]:
        first = chip // self.chips_per_kv * self.kv_per_chip
        return list(range(first, first + self.kv_per_chip))

    def q_heads(self, chip: int) -> list[int | None]:
        """Chip ``chip``'s query heads in order (None: a zero padding head), grouped by its KV heads."""
        group = self.n_heads // self.n_kv_heads
        share = self.q_per_chip // self.kv_per_chip  # of each of the chip's KV heads' groups
        offset = chip % self.chips_per_kv * share
        return [kv * group + offset + j if offset + j < group else None
                for kv in self.kv_heads(chip) for j in range(share)]


def _usable(n_kv_heads: int) -> list[int]:
    return [c for c in (1, 2, 4, 8, 16, 32) if n_kv_heads % c == 0 or c % n_kv_heads == 0]


def check_splits(device: Any, **dims: int) -> None:
    """Raise ValueError unless every named width splits into whole tiles on each chip of ``device``."""
    n = chips(device)
    bad = [f"{name} {size}" for name, size in dims.items() if size % (n * TILE)]
    if bad:
        raise ValueError(f"{' and '.join(bad)} cannot split over {n} chips into whole {TILE}-wide tiles "
                         f"(each needs a multiple of {n * TILE})")


def select_heads(weight: torch.Tensor, heads: list[int | None], head_dim: int, dim: int = 0) -> torch.Tensor:
    """The rows (``dim`` 0) or columns (``dim`` 1) of ``heads`` of a projection, zeros for a padding head."""
    blocks = []
    for head in heads:
        if head is None:
            shape = list(weight.shape)
            shape[dim] = head_dim
            blocks.append(torch.zeros(shape, dtype=weight.dtype))
        else:
            blocks.append(weight.narrow(dim, head * head_dim, head_dim))
    return torch.cat(blocks, dim=dim)


def by_chip(parts: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Per-chip blocks concatenated in chip order: split into ``len(parts)`` equal slices again by the mesh
    mapper, chip ``c`` gets ``parts[c]``."""
    return torch.cat(parts, dim=dim)


def _interleaved(x: Any) -> Any:
    """``x`` as the collectives read it: interleaved (sharded decode activations live in L1 shards)."""
    return ttnn.sharded_to_interleaved(x, ttnn.L1_MEMORY_CONFIG) if x.is_sharded() else x


def gather(x: Any, device: Any) -> Any:
    """A fractured tensor (each chip ``[.., dim / N]``) whole on every chip; itself on one chip."""
    if chips(device) == 1:
        return x
    x = _interleaved(x)
    return ttnn.all_gather(x, 3, memory_config=x.memory_config())


def reduce_scatter(x: Any, device: Any) -> Any:
    """Per-chip partial sums ``[.., dim]`` added over the chips and fractured (chip ``c`` keeps slice ``c``)."""
    if chips(device) == 1:
        return x
    x = _interleaved(x)
    return ttnn.reduce_scatter(x, 3, memory_config=x.memory_config())


def fracture(x: Any, device: Any) -> Any:
    """A replicated tensor's own slice on each chip (no data crosses chips)."""
    if chips(device) == 1:
        return x
    x = _interleaved(x)
    return ttnn.mesh_partition(x, 3, memory_config=x.memory_config())
