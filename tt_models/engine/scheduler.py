"""Which sequences run in the next model step, and the KV blocks they need.

As TT vLLM's runner does, a step is all prefill or all decode, never mixed. The policy is vLLM v0's:

1. A prefill step runs whenever there is prefill work: running sequences with uncomputed prompt tokens
   (later chunks, recomputation, a copy-on-write block to rebuild), then, while no request is swapped out,
   waiting requests admitted in arrival order (FCFS: admission stops at the first request that does not
   fit) while there are free blocks, free slots and prefill token budget. An encoder that runs in the step
   spends its input length of the budget (a larger one runs alone), so encoder-decoder prefills spread over
   steps and the first requests get their first token sooner. With chunked prefill the last sequence takes
   what is left of the budget and continues in later steps (``start_pos > 0``); without it, a prompt runs
   whole.
2. Otherwise a decode step runs the last token of every running sequence. A sequence that needs a block
   when none is free preempts the most recently admitted request: by swapping its blocks to host memory,
   or by freeing them and recomputing it later from its tokens, which gives the same output.
3. If that step preempted nothing, swapped-out requests come back, oldest first, while their blocks (plus
   one per sequence for the next token) and batch slots fit, and decode in the same step. (Swapping in
   before preempting could swap a request in and out in one step, saving blocks not yet written back.)

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
from tt_models.engine.request import Request, RequestStatus, Sequence


@dataclass
class SchedulerOutput:
    is_prefill: bool = False
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, tokens this step)
    swap_out: dict[int, int] = field(default_factory=dict)  # device block -> host block, before the step
    swap_in: dict[int, int] = field(default_factory=dict)  # host block -> device block, after swap_out
    preempted: list[Sequence] = field(default_factory=list)  # sequences that left the batch


class Scheduler:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.kv = KVBlockManager(config.num_kv_blocks, config.block_size, config.num_host_kv_blocks)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.num_preemptions = 0

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        out.scheduled = self._prefills()
        out.is_prefill = bool(out.scheduled)
        if not out.is_prefill:
            out.scheduled = self._decodes(out)
            if not out.preempted:  # as vLLM v0: swap in only when this step preempted nothing
                out.scheduled += self._swap_in(out)
        return out

    # Finishing.

    def fork(self, parent: Sequence, child: Sequence) -> None:
        self.kv.fork(parent.seq_id, child.seq_id)

    def free_seq(self, seq: Sequence) -> None:
        """A finished sequence gives back its self blocks at once."""
        self.kv.free(seq.seq_id)

    def finish(self, request: Request) -> None:
        """All sequences of ``request`` are done (or it is aborted): give back every block it holds."""
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        elif request.status is RequestStatus.SWAPPED:
            self.swapped.remove(request)
        elif request.status is RequestStatus.WAITING:
            self.waiting.remove(request)
        if request.status is not RequestStatus.WAITING:
            for seq in request.live_seqs:
                self.kv.free(seq.seq_id)
        if self.kv.has_cross(request.request_id):  # a waiting request holds none, or reserved ones
            self.kv.free_cross(request.request_id)
        request.status = RequestStatus.FINISHED

    # Steps.

    def _slots_used(self) -> int:
        return sum(r.num_slots for r in self.running)

    def _swap_in(self, out: SchedulerOutput) -> list[tuple[Sequence, int]]:
        """Bring swapped-out requests back, oldest first, while their blocks, one more block per sequence
        and their slots fit; they decode in this step."""
        scheduled: list[tuple[Sequence, int]] = []
        while self.swapped:
            request = self.swapped[0]
            seqs = request.live_seqs
            blocks = self.kv.num_request_blocks(request.request_id)
            if (self._slots_used() + len(seqs) > self.config.max_num_seqs
                    or blocks + len(seqs) > self.kv.num_free_blocks):
                break
            out.swap_in.update(self.kv.swap_in(request.request_id))
            request.status = RequestStatus.RUNNING
            self.running.append(self.swapped.popleft())
            scheduled += self._append_slots(seqs)
        return scheduled

    def _append_slots(self, seqs: list[Sequence]) -> list[tuple[Sequence, int]]:
        """A slot for each sequence's next token; a sequence whose last block was shared rebuilds its copy in
        a prefill next step instead of decoding now."""
        scheduled = []
        for seq in seqs:
            if self.kv.append(seq.seq_id) is not None:
                seq.redo_last_block = True
            else:
                scheduled.append((seq, 1))
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
        while self.waiting and not self.swapped and budget > 0:
            request = self.waiting[0]
            if not self._admit(request):
                break
            self.waiting.popleft()
            self.running.append(request)
            if not take(request):
                break
        return scheduled

    def _admit(self, request: Request) -> bool:
        """Allocate the blocks of a waiting request (new, or preempted by recomputation) if they fit."""
        seqs = request.live_seqs
        if self._slots_used() + request.num_slots > self.config.max_num_seqs:
            return False
        prompt_len = len(request.inputs.prompt_token_ids)
        cross = 0 if self.kv.has_cross(request.request_id) else self.kv.num_blocks_for(request.encoder_len)
        need = cross + sum(self.kv.num_blocks_for(len(s.token_ids)) for s in seqs)
        if need > self.kv.num_free_blocks:
            return False
        self.kv.allocate(request.request_id, [s.seq_id for s in seqs], prompt_len, request.encoder_len or None)
        for seq in seqs:  # recomputation: each sequence's output tokens, in blocks of its own
            if len(seq.token_ids) > prompt_len:
                self.kv.append(seq.seq_id, len(seq.token_ids) - prompt_len)
        request.status = RequestStatus.RUNNING
        if request.metrics.first_scheduled_time is None:
            request.metrics.first_scheduled_time = time.monotonic()
        return True

    def _decodes(self, out: SchedulerOutput) -> list[tuple[Sequence, int]]:
        scheduled: list[tuple[Sequence, int]] = []
        i = 0
        while i < len(self.running):
            request = self.running[i]
            seqs = request.live_seqs
            while sum(self.kv.blocks_to_append(s.seq_id) for s in seqs) > self.kv.num_free_blocks:
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is request:
                    return scheduled
            scheduled += self._append_slots(seqs)
            i += 1
        return scheduled

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.running.remove(request)
        request.metrics.num_preemptions += 1
        self.num_preemptions += 1
        seqs = request.live_seqs
        out.preempted += seqs
        mode = self.config.preemption_mode or ("recompute" if len(seqs) == 1 else "swap")
        if mode == "swap" and self.kv.can_swap_out(request.request_id):
            out.swap_out.update(self.kv.swap_out(request.request_id))
            request.status = RequestStatus.SWAPPED
            self.swapped.append(request)
            return
        for seq in seqs:
            self.kv.free(seq.seq_id)
            seq.num_computed = 0
            seq.redo_last_block = False
        if request.encoder_len:
            self.kv.free_cross(request.request_id)
        request.encoder_cached = False
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)
