"""Gathered KV pages kept while nothing writes to their blocks.

A cross-attention block is written once, at its request's prefill, and read by every decode step after it;
gathering it again at every step was the largest part of a host Whisper decode step (1500 keys per user per
layer). Self- and cross-attention blocks share one cache tensor per layer, so a write to the tensor does not by
itself make every kept set stale: the paged write ops report the blocks they write (``tracked_write``), and a
set is dropped when one of its blocks is written. Any other write to a cache (a copy, a swap, an op that writes
in place) moves torch's version counter of the storage without a report, and then every set kept from that
cache is dropped at its next read: a kept set is never stale.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["KeptSet", "kept_sets", "tracked_write"]


@dataclass
class KeptSet:
    """One set's keys and values (values zero outside its keep), and the blocks it was read from."""
    keys: torch.Tensor
    values: torch.Tensor
    geometry: tuple[int, ...]  # the paged view's shape the blocks are numbered in
    blocks: frozenset[int]


@dataclass
class _Cache:
    ref: weakref.ref
    version: int  # the storage's version when this module last saw every write to it
    pairs: set[tuple[int, int]] = field(default_factory=set)  # the (K, V) pairs whose sets it holds


_lock = threading.RLock()  # reentrant: a cache dying while it is held runs _forget
_caches: dict[int, _Cache] = {}  # id(cache storage tensor) -> what is known of its writes
_sets: dict[tuple[int, int], dict[tuple, KeptSet]] = {}  # (id(K cache), id(V cache)) -> name -> set


def _version(cache: torch.Tensor) -> int | None:
    try:
        return cache._version
    except RuntimeError:  # an inference-mode tensor has no version counter: nothing can be kept safely
        return None


def _forget(key: int) -> None:
    with _lock:
        known = _caches.pop(key, None)
        for pair in known.pairs if known else ():
            _sets.pop(pair, None)


def kept_sets(k_cache: torch.Tensor, v_cache: torch.Tensor) -> dict[tuple, KeptSet] | None:
    """The sets kept from this pair of cache tensors (to read and add to), all still current; None when the
    caches cannot be tracked."""
    versions = [_version(c) for c in (k_cache, v_cache)]
    if None in versions:
        return None
    pair = (id(k_cache), id(v_cache))
    with _lock:
        for cache, version in zip((k_cache, v_cache), versions):
            known = _caches.get(id(cache))
            if known is None or known.ref() is not cache or known.version != version:
                _forget(id(cache))  # an unreported write (or a new tensor where a freed one was)
                known = _caches[id(cache)] = _Cache(weakref.ref(cache, lambda _, key=id(cache): _forget(key)),
                                                    version)
            known.pairs.add(pair)
        return _sets.setdefault(pair, {})


def tracked_write(cache: torch.Tensor, geometry: tuple[int, ...], blocks: torch.Tensor,
                  write: Callable[[], None]) -> None:
    """Run ``write``, which writes ``blocks`` (numbered in a view of shape ``geometry``) of ``cache``, and drop
    the kept sets it makes stale."""
    before = _version(cache)
    write()
    with _lock:
        known = _caches.get(id(cache))
        if known is None or known.ref() is not cache or before is None or known.version != before:
            return  # nothing kept is known current: the next read starts over
        known.version = _version(cache)
        written = set(blocks.flatten().tolist())
        for pair in known.pairs:
            sets = _sets.get(pair, {})
            for name in [n for n, s in sets.items() if s.geometry != geometry or not s.blocks.isdisjoint(written)]:
                del sets[name]
