"""Which sequences run in the next model step, and the KV blocks they need.

As TT vLLM's runner does, a step is all prefill or all decode, never mixed. The policy is vLLM v0's:

1. A prefill step runs whenever there is prefill work: running sequences with uncomputed prompt tokens
   (later chunks, recomputation, a copy-on-write block to rebuild), then, while no request is swapped out,
   waiting requests admitted in arrival order (FCFS: admission stops at the first request that does not
   fit, except for requests that hold their cross blocks already; one whose grammar is still compiling is
   passed over) while there are free blocks, free slots and prefill token budget. An encoder that runs in
   the step spends its input length of the budget (a larger one runs alone), so encoder-decoder prefills
   spread over steps and the first requests get their first token sooner. With chunked prefill the last
   sequence takes what is left of the budget and continues in later steps (``start_pos > 0``); without it,
   a prompt runs whole. While sequences decode, a step does not end in a split prompt: the decodes wait for the next
   prefill step either way, and a whole prompt is one chunk from position 0, which a prefill trace replays (a
   resumed chunk runs eagerly). Prefill steps follow each other while requests wait and fit, as in
   vLLM and the TT plugin's scheduler: the running sequences wait at most ``max_num_seqs`` prompts' worth of prefill
   steps. (Letting them decode once between two admissions instead was measured and dropped: SmolLM2-135M served on
   the host backend, 32 chat streams of 128 tokens arriving at once, every stream then waited at every prefill step,
   and the p99 time between two tokens went from 0.77 to 1.9 s with the 99th-percentile first token unchanged.)
2. Otherwise a decode step runs the last token of every running sequence. A sequence that needs a block
   when none is free preempts the most recently admitted request: by swapping its blocks to host memory,
   or by freeing them and recomputing it later from its tokens, which gives the same output.
3. If that step preempted nothing, swapped-out requests come back, oldest first, while their blocks (plus
   one per sequence for the next token) and batch slots fit, and decode in the same step. (Swapping in
   before preempting could swap a request in and out in one step, saving blocks not yet written back.)

With prefix caching (on unless the model has sliding-window layers or preemption is by swapping), a single-sequence
decoder request is admitted with the cached blocks of its prompt's longest cached prefix and prefills from the first
block after them (``tt_models.engine.prefix_cache``); a prefill step's computed prompt blocks are cached after it runs,
and a sequence's computed blocks past its prompt when it ends.

A sequence that must write into a last block it shares with a sibling (``n > 1``) gets a block of its own
(copy-on-write); instead of copying the block, which the model contract has no call for, the engine
rebuilds it with a one-token prefill from the block boundary, which is what ``prefill_forward`` does for
any ``start_pos > 0``.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from tt_models.engine.config import EngineConfig
from tt_models.engine.kv_blocks import KVBlockManager
from tt_models.engine.prefix_cache import block_keys
from tt_models.engine.request import Request, RequestStatus, Sequence


@dataclass
class SchedulerOutput:
    is_prefill: bool = False
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, tokens this step)
    # Per replica: device block -> host block (before the step), host block -> device block (after swap_out).
    swap_out: dict[int, dict[int, int]] = field(default_factory=dict)
    swap_in: dict[int, dict[int, int]] = field(default_factory=dict)
    preempted: list[Sequence] = field(default_factory=list)  # sequences that left the batch


class Scheduler:
    """With data parallelism each replica has its own KV pool (``kvs[r]``) and ``max_num_seqs / replicas`` batch
    slots; a request is placed on a replica when it arrives (the one with the fewest unfinished requests) and
    stays there: its blocks come from that pool only, it is preempted only for that replica's requests, and
    admission is FCFS within each replica."""

    def __init__(self, config: EngineConfig, kv_windows: tuple[int | None, ...] = (None,),
                 model_caches_prefixes: bool = True) -> None:
        """``kv_windows``: each KV-cache group's window (None: full attention), one block table per group; a sliding
        group's blocks out of the window of every position a scheduled sequence still computes are freed once it is
        scheduled (:meth:`KVBlockManager.drop_out_of_window`). ``model_caches_prefixes``: the model's
        ``supports_prefix_caching``."""
        self.config = config
        self.windowed = any(window is not None for window in kv_windows)
        # (A request whose blocks other requests may hold is recomputed when preempted, never swapped.)
        self.prefix_caching = (config.enable_prefix_caching and model_caches_prefixes and not self.windowed
                               and config.preemption_mode != "swap")
        self.kvs = [KVBlockManager(config.num_kv_blocks, config.block_size, config.num_host_kv_blocks, kv_windows,
                                   prefix_caching=self.prefix_caching)
                    for _ in range(config.data_parallel_size)]
        # vLLM's prefix-cache counters, in prompt tokens: looked up at admission, and found cached.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.slots_per_replica = config.max_num_seqs // config.data_parallel_size
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.num_preemptions = 0
        self._decode_ready = False  # the last step decoded every running sequence and none needs a prefill now

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    @property
    def kv(self) -> KVBlockManager:
        """The KV pool of a single replica."""
        if len(self.kvs) != 1:
            raise ValueError(f"{len(self.kvs)} replicas have a pool each: use kvs[replica]")
        return self.kvs[0]

    @property
    def num_free_blocks(self) -> int:
        return sum(kv.num_free_blocks for kv in self.kvs)

    def place(self, request: Request) -> None:
        """Put a new request on the replica with the fewest unfinished requests (lowest index on ties)."""
        load = [0] * len(self.kvs)
        for queue in (self.waiting, self.running, self.swapped):
            for other in queue:
                load[other.replica] += 1
        request.replica = min(range(len(load)), key=load.__getitem__)

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        # After a decode step without a copy-on-write every running sequence decodes again: only waiting requests
        # can make prefill work (admission), so the running ones need not be scanned.
        decode_turn = self._decode_ready and not self.waiting
        out.scheduled = [] if decode_turn else self._prefills()
        out.is_prefill = bool(out.scheduled)
        self._decode_ready = not out.is_prefill
        if not out.is_prefill:
            out.scheduled = self._decodes(out)
            if not out.preempted:  # as vLLM v0: swap in only when this step preempted nothing
                out.scheduled += self._swap_in(out)
        for seq, tokens in out.scheduled:  # (a prefill step follows a step read: its sequences' counts are current)
            seq.num_scheduled = (seq.num_computed if out.is_prefill else seq.num_scheduled) + tokens
        if self.windowed:
            for seq, _ in out.scheduled:
                self.kvs[seq.request.replica].drop_out_of_window(seq.seq_id, seq.num_computed)
        return out

    def _all_decode_ready(self) -> bool:
        """Whether there are running sequences and none of them needs a prefill (a later chunk, a rebuilt block)."""
        return bool(self.running) and not any(seq.needs_prefill for r in self.running for seq in r.live_seqs)

    def decodes_next(self, seqs: list[Sequence]) -> bool:
        """Whether :meth:`schedule` will decode exactly ``seqs``, in that order, preempting nothing, each a token
        further than its sampled ones: none waits or is swapped out, the running sequences are those, each may still
        grow by the token in flight, and each pool has a free block for every sequence on it (the most a decode step
        takes without copy-on-write, which only forked sequences need)."""
        if self.waiting or self.swapped or not self._decode_ready:
            return False
        if [seq for request in self.running for seq in request.live_seqs] != seqs:
            return False
        if any(len(seq.output_token_ids) >= seq.request.max_new_tokens for seq in seqs):
            return False  # its token in flight is one too many: a step after it would run past its context
        if len(self.kvs) == 1:
            return self.kvs[0].num_free_blocks >= len(seqs) * self.kvs[0].num_groups
        on_replica = [0] * len(self.kvs)
        for seq in seqs:
            on_replica[seq.request.replica] += 1
        return all(kv.num_free_blocks >= n * kv.num_groups for kv, n in zip(self.kvs, on_replica))

    # Finishing.

    def fork(self, parent: Sequence, child: Sequence) -> None:
        self.kvs[parent.request.replica].fork(parent.seq_id, child.seq_id)

    def cache_computed(self, seq: Sequence) -> None:
        """After a prefill step: the sequence's computed prompt blocks can be found by later prompts."""
        if self.prefix_caching:
            self.kvs[seq.request.replica].cache_computed(seq.seq_id, seq.num_computed)

    def free_seq(self, seq: Sequence) -> None:
        """A finished sequence gives back its self blocks at once, its computed ones cached."""
        self._free(self.kvs[seq.request.replica], seq)

    def _free(self, kv: KVBlockManager, seq: Sequence) -> None:
        if self.prefix_caching:
            kv.cache_computed(seq.seq_id, seq.num_computed, seq.token_ids)
        kv.free(seq.seq_id)

    def finish(self, request: Request) -> None:
        """All sequences of ``request`` are done (or it is aborted): give back every block it holds."""
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        elif request.status is RequestStatus.SWAPPED:
            self.swapped.remove(request)
        elif request.status is RequestStatus.WAITING:
            self.waiting.remove(request)
        kv = self.kvs[request.replica]
        if request.status is not RequestStatus.WAITING:
            for seq in request.live_seqs:
                self._free(kv, seq)
        if kv.has_cross(request.request_id):  # a waiting request holds none, or reserved ones
            kv.free_cross(request.request_id)
        request.status = RequestStatus.FINISHED

    # Steps.

    def _slots_used(self, replica: int) -> int:
        return sum(r.num_slots for r in self.running if r.replica == replica)

    def _swap_in(self, out: SchedulerOutput) -> list[tuple[Sequence, int]]:
        """Bring swapped-out requests back, oldest first, while their blocks, one more block per sequence
        and their slots fit; they decode in this step."""
        scheduled: list[tuple[Sequence, int]] = []
        blocked: set[int] = set()  # replicas whose oldest swapped-out request does not fit: the rest wait
        for request in list(self.swapped):
            if request.replica in blocked:
                continue
            kv, seqs = self.kvs[request.replica], request.live_seqs
            blocks = kv.num_request_blocks(request.request_id)
            if (self._slots_used(request.replica) + len(seqs) > self.slots_per_replica
                    or blocks + len(seqs) * kv.num_groups > kv.num_free_blocks):
                blocked.add(request.replica)
                continue
            out.swap_in.setdefault(request.replica, {}).update(kv.swap_in(request.request_id))
            request.status = RequestStatus.RUNNING
            self.swapped.remove(request)
            self.running.append(request)
            scheduled += self._decoding(seqs, kv.append_each([s.seq_id for s in seqs], _positions(seqs)))
        return scheduled

    def _decoding(self, seqs: list[Sequence], copies: list[tuple[int, int] | None]) -> list[tuple[Sequence, int]]:
        """The sequences that decode now, their next token's slot appended: a sequence whose last block was shared
        (a copy-on-write) rebuilds its copy in a prefill next step instead."""
        if not any(copies):  # the usual step: no copy-on-write
            return [(seq, 1) for seq in seqs]
        scheduled = []
        for seq, copy in zip(seqs, copies):
            if copy is None:
                scheduled.append((seq, 1))
            else:
                seq.redo_last_block = True
                self._decode_ready = False
        return scheduled

    def _prefills(self) -> list[tuple[Sequence, int]]:
        budget = self.config.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []

        def take(request: Request) -> bool:
            """Schedule the request's sequences that need prefill; False when the budget ran out."""
            nonlocal budget
            for seq in request.live_seqs:
                if not seq.needs_prefill:
                    continue
                encoder = 0 if request.encoder_cached else request.encoder_len
                if encoder and any(s.request is request for s, _ in scheduled):
                    continue  # the encoder runs with one sequence; its siblings follow next step
                tokens = seq.num_uncomputed
                if self.config.enable_chunked_prefill:
                    tokens = min(tokens, max(budget - encoder, 1))
                if scheduled and encoder + tokens > budget:
                    return False
                # The step's first sequence always runs: an encoder larger than the budget runs alone.
                scheduled.append((seq, tokens))
                budget = max(budget - encoder - tokens, 0)
            return True

        for request in self.running:
            if not take(request):
                return scheduled
        # FCFS per replica: a replica's admissions stop at its first request that does not fit, and while it
        # has swapped-out requests (they come back first). A request whose cross blocks an encode instance filled
        # already holds blocks the others may be waiting for: it is admitted whenever it fits, or they deadlock.
        blocked = {r.replica for r in self.swapped}
        # While sequences decode, a step does not end in a split prompt (the module's docstring says why).
        whole_prompts = self.config.enable_chunked_prefill and self._all_decode_ready()
        for request in list(self.waiting):
            if budget <= 0:
                break
            holds_blocks = self.kvs[request.replica].has_cross(request.request_id)
            if not request.ready or request.replica in blocked and not holds_blocks:
                continue  # (a request whose grammar is compiling lets the others by, as in vLLM)
            if whole_prompts and scheduled and request.prefill_tokens > budget:
                break
            if not self._admit(request):
                if not holds_blocks:
                    blocked.add(request.replica)
                continue
            self.waiting.remove(request)
            self.running.append(request)
            if not take(request):
                break
        return scheduled

    def _admit(self, request: Request) -> bool:
        """Allocate the blocks of a waiting request (new, or preempted by recomputation) if they fit."""
        seqs, kv = request.live_seqs, self.kvs[request.replica]
        if self._slots_used(request.replica) + request.num_slots > self.slots_per_replica:
            return False
        prompt_len = len(request.inputs.prompt_token_ids)
        keys = self._prefix_keys(request)
        cross = 0 if kv.has_cross(request.request_id) else kv.num_blocks_for(request.encoder_len)
        need = cross + kv.num_groups * sum(kv.num_blocks_for(len(s.token_ids)) for s in seqs)
        if keys is not None:
            need -= kv.num_held_hits(keys, prompt_len)
        if need > kv.num_free_blocks:
            return False
        cached = kv.allocate(request.request_id, [s.seq_id for s in seqs], prompt_len, request.encoder_len or None,
                             keys=keys)
        if keys is not None:
            seqs[0].num_computed = seqs[0].num_scheduled = cached  # (one token left: it runs as a decode step)
            self.prefix_cache_queries += prompt_len
            self.prefix_cache_hits += cached
            if request.metrics.first_scheduled_time is None:
                request.num_cached_tokens = cached
        for seq in seqs:  # recomputation: each sequence's output tokens, in blocks of its own
            if len(seq.token_ids) > prompt_len:
                kv.append(seq.seq_id, len(seq.token_ids) - prompt_len)
        request.status = RequestStatus.RUNNING
        if request.metrics.first_scheduled_time is None:
            request.metrics.first_scheduled_time = time.monotonic()
        return True

    def _prefix_keys(self, request: Request) -> list[bytes] | None:
        """The prompt's block keys when the request takes part in prefix caching: one sequence, tokens alone (no
        encoder, no images: the same tokens would not mean the same K/V)."""
        if not self.prefix_caching or request.params.n != 1 or request.encoder_len \
                or request.inputs.prompt_images is not None:
            return None
        if request.block_keys is None:
            request.block_keys = block_keys(request.inputs.prompt_token_ids, self.config.block_size)
        return request.block_keys

    def _decodes(self, out: SchedulerOutput) -> list[tuple[Sequence, int]]:
        fit = self._decode_all()
        if fit is not None:
            return fit
        scheduled: list[tuple[Sequence, int]] = []
        i = 0
        while i < len(self.running):
            request = self.running[i]
            seqs, kv = request.live_seqs, self.kvs[request.replica]
            seq_ids = [seq.seq_id for seq in seqs]
            positions = _positions(seqs)
            while kv.blocks_to_append(seq_ids, positions) > kv.num_free_blocks:
                # The most recently admitted request of the same replica: only its blocks free this pool.
                victim = next(r for r in reversed(self.running) if r.replica == request.replica)
                self._preempt(victim, out)
                if victim is request:
                    break
            else:
                scheduled += self._decoding(seqs, kv.append_each(seq_ids, positions))
                i += 1
        return scheduled

    def _decode_all(self) -> list[tuple[Sequence, int]] | None:
        """The usual decode step: every pool holds the next token of all its running sequences, so nothing is
        preempted and each pool appends them in one call. None (nothing changed) when a pool is short."""
        seqs = [seq for request in self.running for seq in request.live_seqs]
        if len(self.kvs) == 1:
            copies = self.kvs[0].append_each([seq.seq_id for seq in seqs], _positions(seqs))
            return None if copies is None else self._decoding(seqs, copies)
        by_replica: dict[int, list[Sequence]] = {}
        for seq in seqs:
            by_replica.setdefault(seq.request.replica, []).append(seq)
        if any(self.kvs[r].blocks_to_append([s.seq_id for s in group], _positions(group)) > self.kvs[r].num_free_blocks
               for r, group in by_replica.items()):
            return None
        copies: dict[int, tuple[int, int] | None] = {}
        for replica, group in by_replica.items():
            ids = [s.seq_id for s in group]
            copies.update(zip(ids, self.kvs[replica].append_each(ids, _positions(group))))
        return self._decoding(seqs, [copies[seq.seq_id] for seq in seqs])

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.running.remove(request)
        request.metrics.num_preemptions += 1
        self.num_preemptions += 1
        seqs = request.live_seqs
        out.preempted += seqs
        kv = self.kvs[request.replica]
        mode = self.config.preemption_mode or ("recompute" if len(seqs) == 1 else "swap")
        if mode == "swap" and kv.can_swap_out(request.request_id):
            out.swap_out.setdefault(request.replica, {}).update(kv.swap_out(request.request_id))
            request.status = RequestStatus.SWAPPED
            self.swapped.append(request)
            return
        for seq in seqs:
            kv.free(seq.seq_id)
            seq.num_computed = seq.num_scheduled = 0
            seq.redo_last_block = False
        if request.encoder_len:
            kv.free_cross(request.request_id)
        request.encoder_cached = False
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)


def _positions(seqs: list[Sequence]) -> list[int]:
    """The position of the token each sequence's decode step runs: the first not scheduled yet."""
    return [seq.num_scheduled for seq in seqs]
