"""Device memory of a replica, per chip, as measured from the tensors it holds.

A tensor's bytes on one chip are what its buffer takes there: TILE tensors hold whole 32x32 tiles of their padded
shape (bfloat8_b and bfloat4_b tiles with their shared exponents: 1088 and 576 bytes), ROW_MAJOR tensors their
elements. On a mesh, shape and dtype are the per-chip ones, so a split weight counts its slice and a replicated one
its whole copy. DRAM-sharded weights also pad their columns to whole tiles per bank (about 2% on Wormhole for Llama
3.1 8B), which this does not count.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from tt_models.runtime import ttnn

TILE = 32
DRAM_BYTES = {"wormhole": 12 * 10**9, "blackhole": 32 * 10**9}  # per chip: n150/n300 chips, p150


def tile_bytes(dtype: Any) -> int:
    return {ttnn.float32: 4096, ttnn.bfloat16: 2048, ttnn.bfloat8_b: 1088, ttnn.bfloat4_b: 576}[dtype]


def tensor_bytes(t: Any) -> int:
    """One chip's bytes of a device tensor."""
    if t.layout == ttnn.TILE_LAYOUT:
        return math.prod(tuple(t.padded_shape)) // (TILE * TILE) * tile_bytes(t.dtype)
    element = {ttnn.float32: 4, ttnn.bfloat16: 2, ttnn.int32: 4, ttnn.uint32: 4}[t.dtype]
    return math.prod(tuple(t.shape)) * element


def device_tensors(obj: Any) -> Iterator[Any]:
    """Every device tensor an object holds (attributes, lists, tuples and dicts, recursively), each once."""
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, (str, int, float, bool)):
            continue
        seen.add(id(item))
        if hasattr(item, "padded_shape") and hasattr(item, "memory_config"):
            if item.is_allocated():
                yield item
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif hasattr(item, "__dict__") and type(item).__module__.startswith("tt_models."):
            stack.extend(vars(item).values())


def bytes_per_chip(obj: Any) -> int:
    """One chip's bytes of every device tensor ``obj`` holds (a model replica: its weights)."""
    return sum(tensor_bytes(t) for t in device_tensors(obj))


def dram_per_chip(device: Any) -> int:
    """The DRAM of one chip of ``device``'s board."""
    return DRAM_BYTES["wormhole" if device.arch() == ttnn.Arch.WORMHOLE_B0 else "blackhole"]
