"""The paged KV pool: per layer, K and V tensors ``[num_blocks, n_kv_heads, block_size, head_dim]``; and the KV-cache
groups of a model with sliding-window layers.

A model whose layers attend different spans (Gemma 3's sliding and global layers, Mistral's window) splits its layers
into KV-cache groups as vLLM's hybrid KV cache manager does (``_get_kv_cache_groups_uniform_page_size``): the layers of
one attention span (window) together, split into groups of equal size (the smallest span's layer count, or the largest
one's when the counts are close), the ``i``-th group of a span holding every ``n``-th layer from its ``i``-th. Each group
has its own block table per request, a sliding group's dropping the blocks that fall out of the window, and the ``j``-th
layer of every group shares one K/V tensor pair (the groups' block ids never collide: one pool hands them all out), so
``group_size`` tensor pairs hold the whole model's KV.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from tt_models.tt.weights import as_tensor

TILE = 32


def allocate_paged_kv_cache(shape: Sequence[int], num_layers: int, dtype: Any, device: Any,
                            shared: Sequence[int] | None = None) -> list[list[Any]]:
    """Zeroed ``[K, V]`` per layer on ``device`` (replicated over a mesh). ``shared[i]``: the tensor pair layer ``i``
    holds, layers naming the same one sharing it (default: a pair of its own)."""
    num_blocks, n_kv_heads, block_size, head_dim = shape
    if block_size % TILE or head_dim % TILE:
        raise ValueError(f"KV cache shape {tuple(shape)}: block_size and head_dim must be multiples of {TILE}")
    zeros = torch.zeros(num_blocks, n_kv_heads, block_size, head_dim)
    pairs: dict[int, list[Any]] = {}
    for layer in range(num_layers):
        index = layer if shared is None else shared[layer]
        if index not in pairs:
            pairs[index] = [as_tensor(zeros, device, dtype=dtype), as_tensor(zeros, device, dtype=dtype)]
    return [pairs[layer if shared is None else shared[layer]] for layer in range(num_layers)]


@dataclass(frozen=True)
class KVCacheGroups:
    """The KV-cache groups of a model's layers: ``layers[g]`` the layers of group ``g`` (in vLLM's order: groups of the
    span layer 0 has first), ``windows[g]`` their attention window (None: full attention)."""

    layers: tuple[tuple[int, ...], ...]
    windows: tuple[int | None, ...]

    @classmethod
    def of(cls, layer_windows: Sequence[int | None]) -> "KVCacheGroups":
        """The groups of layers whose windows are ``layer_windows`` (None: full attention)."""
        spans: dict[int | None, list[int]] = {}
        for layer, window in enumerate(layer_windows):
            spans.setdefault(window, []).append(layer)
        counts = [len(layers) for layers in spans.values()]
        size = max(counts) if max(counts) < min(counts) * 1.5 else min(counts)
        layers, windows = [], []
        for window, span in spans.items():
            n = -(-len(span) // size)
            layers += [tuple(span[i::n]) for i in range(n)]
            windows += [window] * n
        return cls(tuple(layers), tuple(windows))

    @property
    def num_layers(self) -> int:
        return sum(len(group) for group in self.layers)

    @property
    def group_of_layer(self) -> list[int]:
        out = [0] * self.num_layers
        for group, layers in enumerate(self.layers):
            for layer in layers:
                out[layer] = group
        return out

    @property
    def shared_tensors(self) -> list[int]:
        """Each layer's tensor pair: the ``j``-th layer of every group shares pair ``j`` (vLLM's layout)."""
        out = [0] * self.num_layers
        for layers in self.layers:
            for j, layer in enumerate(layers):
                out[layer] = j
        return out

    @property
    def is_hybrid(self) -> bool:
        """Whether any layer attends a window (else one table of every block serves every layer, as always)."""
        return any(window is not None for window in self.windows)


def group_page_tables(groups: KVCacheGroups | None, page_tables_per_group: Sequence[Any] | None,
                      page_tables_per_layer: Sequence[Any] | None) -> list[torch.Tensor] | None:
    """One int32 page table per KV-cache group from what the runner sent: ``page_tables_per_group`` (tt-models' engine,
    the groups' order) or ``page_tables_per_layer`` (TT vLLM's plugin: group ``g``'s table for each of its layers);
    None when it sent neither (every layer reads ``page_table``). Raises ValueError when they do not fit the groups."""
    if page_tables_per_group is None and page_tables_per_layer is None:
        return None
    if groups is None:
        raise ValueError("per-group page tables for a model whose layers all attend every key: one page_table serves "
                         "them all")
    if page_tables_per_group is not None:
        tables = [torch.as_tensor(t).to(torch.int32) for t in page_tables_per_group]
        if len(tables) != len(groups.layers):
            raise ValueError(f"page_tables_per_group has {len(tables)} tables; the model has {len(groups.layers)} "
                             f"KV-cache groups (windows {list(groups.windows)})")
        return tables
    per_layer = [torch.as_tensor(t).to(torch.int32) for t in page_tables_per_layer]
    if len(per_layer) != groups.num_layers:
        raise ValueError(f"page_tables_per_layer has {len(per_layer)} tables for {groups.num_layers} layers")
    tables = [per_layer[layers[0]] for layers in groups.layers]
    for layer, group in enumerate(groups.group_of_layer):  # vLLM grouped the layers as the model does
        if not torch.equal(per_layer[layer], tables[group]):
            raise ValueError(f"page_tables_per_layer: layer {layer}'s table differs from layer "
                             f"{groups.layers[group][0]}'s, the first of its KV-cache group {group}")
    return tables


def table_key(group: int) -> str:
    """The name of group ``group``'s page table among a forward's inputs (group 0's is the contract's ``page_table``)."""
    return "page_table" if group == 0 else f"page_table_{group}"


def layer_tables(tables: dict[str, Any], groups: KVCacheGroups | None, num_layers: int, prefix: str = "") -> list[Any]:
    """Each layer's page table among a forward's inputs ``tables``: its group's when they hold group tables beyond the
    first (``{prefix}page_table_1``), else ``{prefix}page_table`` for every layer."""
    if groups is None or f"{prefix}{table_key(1)}" not in tables:
        return [tables[f"{prefix}page_table"]] * num_layers
    return [tables[prefix + table_key(group)] for group in groups.group_of_layer]
