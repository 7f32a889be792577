"""Automatic prefix caching: full KV blocks found again by the tokens they hold, as vLLM's and nano-vllm's block
managers do.

A block's key is the SHA-256 of its parent block's key and its own token ids (vLLM's default hash since it dropped
Python's ``hash``, whose collisions another user's prompt could be built to hit), so a key names the whole prefix up
to the block's end. A request whose prompt starts with cached blocks takes them (their reference counts go up) and
prefills from the first block not cached. A computed block is registered once its prefill step has run (never while
a step still writes it: another request in the same step would read it unwritten), and the full blocks of generated
tokens when the sequence ends, so that the next turn of a chat, whose prompt holds this one's answer, finds them. A
cached block whose last holder lets go stays free with its key: it is reused last (:class:`KVBlockManager`'s free list
is least recently freed first), and taking it for anything else forgets its key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def block_keys(token_ids: Sequence[int], block_size: int, parent: bytes = b"") -> list[bytes]:
    """The key of each full block of ``token_ids``: each chained to the one before it, the first to ``parent`` (the
    key of the block before them; none: they start the sequence)."""
    tokens = np.asarray(token_ids, dtype=np.int64)
    keys = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hashlib.sha256(parent + tokens[start:start + block_size].tobytes()).digest()
        keys.append(parent)
    return keys


class PrefixCache:
    """Which block holds each cached key, both ways."""

    def __init__(self) -> None:
        self._block_of: dict[bytes, int] = {}
        self._key_of: dict[int, bytes] = {}

    def hits(self, keys: Sequence[bytes], max_blocks: int) -> list[int]:
        """The cached blocks holding the longest prefix of ``keys``, at most ``max_blocks``."""
        blocks = []
        for key in keys[:max_blocks]:
            block = self._block_of.get(key)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def register(self, key: bytes, block: int) -> None:
        """``block`` now holds ``key``'s tokens; a key another block holds already keeps that block."""
        if key not in self._block_of and block not in self._key_of:
            self._block_of[key] = block
            self._key_of[block] = key

    def forget(self, block: int) -> None:
        """``block`` is taken for other tokens."""
        key = self._key_of.pop(block, None)
        if key is not None:
            del self._block_of[key]

    def clear(self) -> None:
        self._block_of.clear()
        self._key_of.clear()
