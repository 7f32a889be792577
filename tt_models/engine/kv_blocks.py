"""KV block management: one pool of block ids for self- and cross-attention, and a host pool for swap.

This is vLLM's block space manager v1 as the encoder-decoder seed describes it
(``vllm-encoder-decoder-infrastructure.md``, "Memory management"):

- each sequence has a self-attention block table; each request has at most one cross-attention table
  (``ceil(encoder_len / block_size)`` blocks, written at prefill, read-only afterwards) that all its
  sequences read;
- self and cross blocks come from the same block ids, those of every decoder layer's K/V pool
  ``[num_blocks, n_kv_heads, block_size, head_dim]``;
- the free-block counts move by the seed's formulas: allocate takes the request's blocks (cross table +
  self tables), swap moves them between device and host, free / free_cross give a table's blocks back to
  the pool the request is in, reset frees everything.

Sequences of one request (n > 1) share blocks copy-on-write with reference counts, as v1 does: allocate
gives every sequence the prompt's blocks, ``fork`` gives the child its parent's blocks, and a sequence
about to write into a shared, partly filled last block first gets a block of its own (``append`` returns
the copy to make). A block shared by several tables therefore counts once in the seed's sums, and
``free(seq)`` frees only the blocks no other sequence still holds.

KV-cache groups (a model with sliding-window layers, ``windows``: one per group, None for full attention; see
``tt_models.tt.kv_cache.KVCacheGroups``) give each sequence one self table per group, all from the one pool, as vLLM's
hybrid KV cache manager does: a group's layers read and write its table, the ``j``-th layer of every group sharing one
K/V tensor. Every group's table covers the same positions, so appends, forks and frees move all of them together; a
sliding group's table drops (:meth:`KVBlockManager.drop_out_of_window`) the blocks wholly before the window of every
position still to be computed, each dropped entry becoming ``NULL_BLOCK`` (block 0, which the pool then never hands
out, as vLLM's null block: a model reading through it reads nothing its masks keep).

With ``prefix_caching`` (one full-attention group), a single-sequence decoder request allocated with its prompt's block
keys starts with the cached blocks holding its prompt's longest cached prefix (``tt_models.engine.prefix_cache``);
:meth:`KVBlockManager.cache_computed` registers its blocks once computed. Such a request is recomputed when preempted,
never swapped: its blocks may be other requests' too.

The manager only plans: the caller moves the KV (copy-on-write copies, swap mappings) through the model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tt_models.engine.prefix_cache import PrefixCache, block_keys

NULL_BLOCK = 0  # what a sliding group's table holds for a dropped block (the model's page table)
_DROPPED = -1  # a dropped entry in the manager's tables (block ids of either pool are >= 0)


def most_blocks_held(windows: Sequence[int | None], block_size: int, num_tokens: int) -> int:
    """The most blocks a sequence growing to ``num_tokens`` holds in the KV-cache groups of ``windows`` once its prompt
    is computed: every block in a full-attention group; in a sliding group those from the block boundary before its
    next position less the window, plus the block it appends before the step drops the oldest."""
    blocks = -(-num_tokens // block_size)
    return sum(blocks if window is None else min(blocks, -(-(window - 1) // block_size) + 2) for window in windows)


class _Pool:
    """Block ids ``0..size-1`` with reference counts; a block is free at count 0. The least recently freed free block
    is taken first, so that a cached one (``cache``) is reused for other tokens as late as possible."""

    def __init__(self, size: int, first: int = 0, cache: PrefixCache | None = None) -> None:
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(first, size))
        self.refs = [0] * size
        self.cache = cache

    def take(self, refs: int = 1) -> int:
        block, _ = self.free.popitem(last=False)
        self.refs[block] = refs
        if self.cache is not None:
            self.cache.forget(block)
        return block

    def share(self, block: int, refs: int) -> None:
        """``refs`` more holders of a cached block, free or not."""
        if self.refs[block] == 0:
            del self.free[block]
        self.refs[block] += refs

    def release(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.free[block] = None


@dataclass(slots=True)
class _Seq:
    request_id: str
    num_tokens: int
    tables: list[list[int]]  # one per KV-cache group
    dropped: list[int] = field(default_factory=list)  # each group's leading dropped entries
    num_dropped: int = 0
    keys: list[bytes] | None = None  # its full blocks' keys (its prompt's, then its output's), in prefix caching
    num_keyed: int = 0  # its leading blocks that are cached (hits, or registered by cache_computed)

    @property
    def table(self) -> list[int]:
        return self.tables[0]

    def copy(self) -> "_Seq":
        return _Seq(self.request_id, self.num_tokens, [list(t) for t in self.tables], list(self.dropped),
                    self.num_dropped)  # (a fork: only single-sequence requests key their blocks)


@dataclass(slots=True)
class _Request:
    seq_ids: set[int]
    cross: list[int] | None  # None: decoder-only, or freed by free_cross
    on_host: bool = False


class KVBlockManager:
    """Block tables over ``num_blocks`` device blocks of ``block_size`` tokens and ``num_host_blocks`` host
    blocks. Requests are strings and sequences ints, both unique while allocated (as in vLLM).

    Calls that need blocks raise RuntimeError when there are too few (ask ``can_*`` first); misuse (an
    unknown or already allocated id, a swapped-out request where a resident one is needed) raises
    ValueError. Every call costs O(blocks it touches).
    """

    def __init__(self, num_blocks: int, block_size: int, num_host_blocks: int = 0,
                 windows: Sequence[int | None] = (None,), prefix_caching: bool = False) -> None:
        """``windows``: each KV-cache group's attention window (None: full attention); with a window the pool keeps
        block ``NULL_BLOCK`` out of every table, and ``num_blocks`` (the blocks it hands out) is one less.
        ``prefix_caching``: requests allocated with block keys share cached blocks (full attention only)."""
        if num_blocks < 1 or block_size < 1 or num_host_blocks < 0 or not windows:
            raise ValueError(f"KVBlockManager(num_blocks={num_blocks}, block_size={block_size}, "
                             f"num_host_blocks={num_host_blocks}, windows={windows}): need num_blocks, block_size >= 1, "
                             "num_host_blocks >= 0 and a group")
        if prefix_caching and tuple(windows) != (None,):
            raise ValueError(f"prefix caching takes one full-attention KV-cache group, not windows {windows}")
        self.prefix_cache = PrefixCache() if prefix_caching else None
        self.block_size = block_size
        self.num_host_blocks = num_host_blocks
        self.windows = tuple(windows)
        self.num_groups = len(self.windows)
        self.windowed = any(w is not None for w in self.windows)
        self.num_blocks = num_blocks - self.windowed
        self.reset()

    def reset(self) -> None:
        """Forget every table: all device and host blocks are free again."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        self._device = _Pool(self.num_blocks + self.windowed, first=NULL_BLOCK + 1 if self.windowed else 0,
                             cache=self.prefix_cache)
        self._host = _Pool(self.num_host_blocks)
        self._requests: dict[str, _Request] = {}
        self._seqs: dict[int, _Seq] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self._device.free)

    @property
    def num_free_host_blocks(self) -> int:
        return len(self._host.free)

    def self_table(self, seq_id: int) -> list[int]:
        """The sequence's self-attention blocks (host block ids while its request is swapped out)."""
        return list(self._seq(seq_id).table)

    def group_tables(self, seq_id: int) -> list[list[int]]:
        """The sequence's self table in each KV-cache group, a dropped block as ``NULL_BLOCK``."""
        return [[NULL_BLOCK if b == _DROPPED else b for b in table] for table in self._seq(seq_id).tables]

    def blocks_held(self, seq_id: int) -> list[int]:
        """The blocks the sequence's table holds in each KV-cache group (its dropped ones left out)."""
        seq = self._seq(seq_id)
        return [len(table) - dropped for table, dropped in zip(seq.tables, seq.dropped)]

    def table_tail(self, seq_id: int) -> tuple[int, int, int]:
        """The length and last block of the sequence's self table and how many blocks its groups dropped, without
        copying them (O(1)): what changes when any of its tables does."""
        seq = self._seqs.get(seq_id) or self._seq(seq_id)  # (the lookup inline: every decoding sequence, every step)
        table = seq.tables[0]
        return len(table), table[-1] if table else -1, seq.num_dropped

    def cross_table(self, request_id: str) -> list[int]:
        """The request's cross-attention blocks; empty for a decoder-only request or after ``free_cross``."""
        return list(self._request(request_id).cross or ())

    def num_request_blocks(self, request_id: str) -> int:
        """The request's distinct blocks (the seed's "seq group blocks"), wherever they are."""
        return len(self._blocks(self._request(request_id)))

    def is_swapped_out(self, request_id: str) -> bool:
        return self._request(request_id).on_host

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # Allocate, append, fork.

    def can_allocate(self, prompt_len: int, encoder_len: int | None = None) -> bool:
        return self._allocate_cost(prompt_len, encoder_len) <= self.num_free_blocks

    def num_held_hits(self, keys: Sequence[bytes], prompt_len: int) -> int:
        """The cached blocks a prompt of ``prompt_len`` tokens with block ``keys`` would take that requests hold
        already: :meth:`allocate` takes that many fewer free blocks."""
        return self._held(self._hits(keys, prompt_len))

    def _held(self, blocks: list[int]) -> int:
        refs = self._device.refs
        return sum(refs[block] > 0 for block in blocks)

    def _hits(self, keys: Sequence[bytes] | None, prompt_len: int) -> list[int]:
        """The cached blocks of the prompt's longest cached prefix, less its last token (its logits are computed)."""
        if keys is None or self.prefix_cache is None:
            return []
        return self.prefix_cache.hits(keys, (prompt_len - 1) // self.block_size)

    def allocate(self, request_id: str, seq_ids: list[int], prompt_len: int,
                 encoder_len: int | None = None, keys: Sequence[bytes] | None = None) -> int:
        """The request's cross table (none when ``encoder_len`` is 0 or None; the reserved one after
        ``reserve_cross``) and, for each sequence, a self table holding ``prompt_len`` tokens; the sequences share
        the prompt's blocks. ``keys``: the prompt's full-block keys, for a single-sequence decoder request taking part
        in prefix caching; returns how many of its leading tokens are in cached blocks already."""
        reserved = self._requests.get(request_id)
        if reserved is not None and (reserved.seq_ids or reserved.on_host or reserved.cross is None
                                     or len(reserved.cross) != self.num_blocks_for(encoder_len or 0)):
            raise ValueError(f"request {request_id!r} is already allocated")
        if not seq_ids or len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"request {request_id!r}: seq_ids must be distinct and non-empty, got {seq_ids}")
        for seq_id in seq_ids:
            if seq_id in self._seqs:
                raise ValueError(f"sequence {seq_id} is already allocated (request "
                                 f"{self._seqs[seq_id].request_id!r})")
        if keys is not None and (len(seq_ids) > 1 or encoder_len or reserved):
            raise ValueError(f"request {request_id!r}: prefix caching takes a single sequence without an encoder")
        hits = self._hits(keys, prompt_len)
        need = self._allocate_cost(prompt_len, None if reserved else encoder_len) - self._held(hits)
        if need > self.num_free_blocks:
            raise RuntimeError(f"allocate {request_id!r}: needs {need} blocks, {self.num_free_blocks} free")
        for block in hits:  # (before any take: a free cached block taken for other tokens would be forgotten)
            self._device.share(block, refs=1)
        blocks = self.num_blocks_for(prompt_len)
        tables = [hits + [self._device.take(refs=len(seq_ids)) for _ in range(blocks - len(hits))]
                  for _ in self.windows]
        if reserved is not None:  # the cross blocks reserved for it (its encoder ran elsewhere)
            reserved.seq_ids = set(seq_ids)
        else:
            cross = [self._device.take() for _ in range(self.num_blocks_for(encoder_len))] if encoder_len else None
            self._requests[request_id] = _Request(set(seq_ids), cross)
        for seq_id in seq_ids:
            self._seqs[seq_id] = _Seq(request_id, prompt_len, [list(t) for t in tables], [0] * self.num_groups,
                                      keys=None if keys is None else list(keys), num_keyed=len(hits))
        return len(hits) * self.block_size

    def cache_computed(self, seq_id: int, num_computed: int, token_ids: Sequence[int] | None = None) -> None:
        """The sequence's first ``num_computed`` tokens are in its blocks: its full prompt blocks among them can be
        found by their keys, and with its ``token_ids`` (prompt and output) its full blocks past the prompt's (a
        sequence allocated without keys: nothing)."""
        seq = self._seq(seq_id)
        if seq.keys is None:
            return
        full, size = num_computed // self.block_size, self.block_size
        if token_ids is not None and full > len(seq.keys):
            seq.keys += block_keys(token_ids[len(seq.keys) * size:full * size], size,
                                   parent=seq.keys[-1] if seq.keys else b"")
        full = min(len(seq.keys), full)
        for i in range(seq.num_keyed, full):
            self.prefix_cache.register(seq.keys[i], seq.table[i])
        seq.num_keyed = max(seq.num_keyed, full)

    def reserve_cross(self, request_id: str, encoder_len: int) -> list[int]:
        """Cross blocks for a request not allocated yet, whose encoder states arrive first (encoder
        disaggregation); its ``allocate`` later takes them. ``free_cross`` gives them back unused."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already allocated")
        need = self.num_blocks_for(encoder_len)
        if not 0 < need <= self.num_free_blocks:
            raise RuntimeError(f"reserve_cross {request_id!r}: needs {need} blocks, {self.num_free_blocks} free")
        cross = [self._device.take() for _ in range(need)]
        self._requests[request_id] = _Request(set(), cross)
        return list(cross)

    def has_cross(self, request_id: str) -> bool:
        """Whether the request holds cross blocks (allocated with an encoder, or reserved)."""
        request = self._requests.get(request_id)
        return request is not None and request.cross is not None

    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        return self._append_cost(self._resident_seq(seq_id), num_tokens)[0] <= self.num_free_blocks

    def append(self, seq_id: int, num_tokens: int = 1) -> tuple[int, int] | None:
        """Room for ``num_tokens`` more tokens: a new block each time the sequence crosses a block boundary.

        Returns ``(src, dst)`` when the last block was shared and partly filled: the caller copies block
        ``src`` to ``dst`` (K and V, every layer) before writing the new tokens.
        """
        seq = self._resident_seq(seq_id)
        need, copy_last = self._append_cost(seq, num_tokens)
        if need > self.num_free_blocks:
            raise RuntimeError(f"append to sequence {seq_id}: needs {need} blocks, {self.num_free_blocks} free")
        return self._append(seq, num_tokens, copy_last)

    def blocks_to_append(self, seq_ids: list[int], positions: list[int] | None = None) -> int:
        """Free blocks that ``append_each(seq_ids, positions)`` would take."""
        seqs = self._needing_slots(seq_ids, positions)
        return sum(self._append_cost(seq, 1)[0] for seq in seqs if seq is not None)

    def _needing_slots(self, seq_ids: list[int], positions: list[int] | None) -> list[_Seq | None]:
        """Each sequence, None where position ``positions[i]`` has its slot already: a prompt's last token run as a
        decode step (chunked prefill, or a recomputation's), whose slot came with the prompt's blocks."""
        seqs = [self._resident_seq(seq_id) for seq_id in seq_ids]
        if positions is None:
            return seqs
        return [None if position < seq.num_tokens else seq for seq, position in zip(seqs, positions)]

    def append_each(self, seq_ids: list[int],
                    positions: list[int] | None = None) -> list[tuple[int, int] | None] | None:
        """A slot for the token each sequence runs (a decode step) at ``positions`` (None: the next one), all or
        none: None when the pool is short; returns each sequence's copy-on-write as :meth:`append` does. A position
        the sequence has a slot for already gets none. (One call per step and pool: decode runs it for every
        sequence.)"""
        seqs = self._needing_slots(seq_ids, positions)
        size, refs = self.block_size, self._device.refs
        # The usual sequence has room in its last block, which it alone holds: it only counts the token. The others
        # (at a block boundary, or sharing their last block) cost blocks, as _append_cost and _append say.
        slow = [i for i, seq in enumerate(seqs) if seq is not None and (
            seq.num_tokens >= len(seq.table) * size or seq.num_tokens % size and refs[seq.table[-1]] > 1)]
        costs = [self._append_cost(seqs[i], 1) for i in slow]
        if sum(cost for cost, _ in costs) > len(self._device.free):
            return None
        for seq in seqs:
            if seq is not None:
                seq.num_tokens += 1
        copies: list[tuple[int, int] | None] = [None] * len(seqs)
        for i, (_, copy_last) in zip(slow, costs):
            copies[i] = self._append(seqs[i], 0, copy_last)  # (its token is counted above)
        return copies

    def _append(self, seq: _Seq, num_tokens: int, copy_last: bool) -> tuple[int, int] | None:
        """(The copy returned is group 0's: every group's last block is shared alike.)"""
        copy = None
        seq.num_tokens += num_tokens
        for group, table in enumerate(seq.tables):
            if copy_last:
                pair = table[-1], self._device.take()
                self._device.release(pair[0])
                table[-1] = pair[1]
                copy = copy or pair
            while len(table) * self.block_size < seq.num_tokens:
                table.append(self._device.take())
        return copy

    def drop_out_of_window(self, seq_id: int, first_pos: int) -> int:
        """Give back each sliding group's blocks that no position from ``first_pos`` (the first not computed yet) on
        reads: those wholly before ``start - window + 1``, ``start`` the block boundary ``first_pos`` falls in (a
        prefill restarts there: its recomputed positions read back a window from it); returns how many were freed.
        vLLM's ``SlidingWindowManager`` frees from ``first_pos - window + 1``."""
        seq = self._resident_seq(seq_id)
        size, freed = self.block_size, 0
        start = first_pos // size * size
        for group, window in enumerate(self.windows):
            if window is None:
                continue
            table = seq.tables[group]
            keep_from = min(max(0, start - window + 1) // size, len(table) - 1)
            for i in range(seq.dropped[group], keep_from):
                self._device.release(table[i])
                table[i] = _DROPPED
                freed += 1
            if keep_from > seq.dropped[group]:
                seq.num_dropped += keep_from - seq.dropped[group]
                seq.dropped[group] = keep_from
        return freed

    def fork(self, parent_seq: int, child_seq: int) -> None:
        """The child (a new sequence of the parent's request) shares every block of the parent."""
        parent = self._resident_seq(parent_seq)
        if child_seq in self._seqs:
            raise ValueError(f"fork {parent_seq} -> {child_seq}: sequence {child_seq} is already allocated")
        for table in parent.tables:
            for block in table:
                if block != _DROPPED:
                    self._device.refs[block] += 1
        self._seqs[child_seq] = parent.copy()
        self._requests[parent.request_id].seq_ids.add(child_seq)

    # Free.

    def free(self, seq_id: int) -> None:
        """Give back the sequence's self blocks (those no sibling holds) to the pool its request is in."""
        seq = self._seq(seq_id)
        request = self._requests[seq.request_id]
        pool = self._pool(request)
        for table in seq.tables:
            for block in reversed(table):  # (a prompt's first blocks are then the last reused for other tokens)
                if block != _DROPPED:
                    pool.release(block)
        del self._seqs[seq_id]
        request.seq_ids.remove(seq_id)
        self._forget_if_empty(seq.request_id, request)

    def free_cross(self, request_id: str) -> None:
        """Give back the request's cross blocks to the pool it is in."""
        request = self._request(request_id)
        if request.cross is None:
            raise ValueError(f"request {request_id!r} has no cross table (decoder-only, or already freed)")
        pool = self._pool(request)
        for block in request.cross:
            pool.release(block)
        request.cross = None
        self._forget_if_empty(request_id, request)

    # Swap: the caller copies the KV of each mapped block.

    def can_swap_out(self, request_id: str) -> bool:
        return len(self._blocks(self._resident(request_id, on_host=False))) <= self.num_free_host_blocks

    def swap_out(self, request_id: str) -> dict[int, int]:
        """Move all of a preempted request's blocks to host memory; returns device block -> host block."""
        if any(self._seqs[seq_id].keys is not None for seq_id in self._request(request_id).seq_ids):
            raise ValueError(f"request {request_id!r} takes part in prefix caching: recompute it, its blocks may be "
                             "other requests' too")
        return self._move(request_id, on_host=True)

    def can_swap_in(self, request_id: str) -> bool:
        """Room for the request's blocks; headroom for the appends that follow is the scheduler's call."""
        return len(self._blocks(self._resident(request_id, on_host=True))) <= self.num_free_blocks

    def swap_in(self, request_id: str) -> dict[int, int]:
        """Move a swapped-out request's blocks back to the device; returns host block -> device block."""
        return self._move(request_id, on_host=False)

    def _move(self, request_id: str, on_host: bool) -> dict[int, int]:
        """Every table of the request to the other pool; shared blocks stay shared, with their counts."""
        request = self._resident(request_id, on_host=not on_host)
        src, dst = (self._device, self._host) if on_host else (self._host, self._device)
        need = len(self._blocks(request))
        if need > len(dst.free):
            raise RuntimeError(f"swap {'out' if on_host else 'in'} {request_id!r}: needs {need} blocks, "
                               f"{len(dst.free)} free")
        mapping: dict[int, int] = {}
        for table in self._tables(request):
            for i, block in enumerate(table):
                if block == _DROPPED:
                    continue
                if block not in mapping:
                    mapping[block] = dst.take(refs=src.refs[block])
                src.release(block)
                table[i] = mapping[block]
        request.on_host = on_host
        return mapping

    # Helpers.

    def _allocate_cost(self, prompt_len: int, encoder_len: int | None) -> int:
        if prompt_len < 0 or (encoder_len or 0) < 0:
            raise ValueError(f"negative length: prompt_len={prompt_len}, encoder_len={encoder_len}")
        return self.num_groups * self.num_blocks_for(prompt_len) + self.num_blocks_for(encoder_len or 0)

    def _append_cost(self, seq: _Seq, num_tokens: int) -> tuple[int, bool]:
        """Blocks needed for ``num_tokens`` more tokens, and whether the last block must be copied first
        (:meth:`append_each` tells the sequences that need neither apart without it)."""
        if num_tokens < 1:
            raise ValueError(f"append: num_tokens must be >= 1, got {num_tokens}")
        size = self.block_size
        copy_last = seq.num_tokens % size != 0 and self._device.refs[seq.table[-1]] > 1
        return (-(-(seq.num_tokens + num_tokens) // size) - len(seq.table) + copy_last) * self.num_groups, copy_last

    def _tables(self, request: _Request) -> list[list[int]]:
        tables = [table for seq_id in request.seq_ids for table in self._seqs[seq_id].tables]
        return tables + [request.cross] if request.cross is not None else tables

    def _blocks(self, request: _Request) -> set[int]:
        """The request's distinct blocks: the seed's "seq group blocks"."""
        return {block for table in self._tables(request) for block in table if block != _DROPPED}

    def _pool(self, request: _Request) -> _Pool:
        return self._host if request.on_host else self._device

    def _forget_if_empty(self, request_id: str, request: _Request) -> None:
        if not request.seq_ids and request.cross is None:
            del self._requests[request_id]

    def _request(self, request_id: str) -> _Request:
        if request_id not in self._requests:
            raise ValueError(f"unknown request {request_id!r} (never allocated, or freed)")
        return self._requests[request_id]

    def _seq(self, seq_id: int) -> _Seq:
        if seq_id not in self._seqs:
            raise ValueError(f"unknown sequence {seq_id} (never allocated, or freed)")
        return self._seqs[seq_id]

    def _resident(self, request_id: str, on_host: bool) -> _Request:
        request = self._request(request_id)
        if request.on_host != on_host:
            raise ValueError(f"request {request_id!r} is swapped out: swap it in first" if request.on_host
                             else f"request {request_id!r} is not swapped out")
        return request

    def _resident_seq(self, seq_id: int) -> _Seq:
        """A sequence whose request is on the device (appending and forking need its blocks there)."""
        seq = self._seqs.get(seq_id)
        if seq is None or self._requests[seq.request_id].on_host:  # raise, naming the problem
            self._resident(self._seq(seq_id).request_id, on_host=False)
        return seq
