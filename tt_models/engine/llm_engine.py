"""The engine loop: requests in, one scheduled model step at a time, outputs out.

``add_request`` checks and processes a prompt at once (a bad one raises ValueError for that request alone);
``step`` schedules, runs the model, samples, detokenizes, checks stops and frees the blocks of finished
sequences and requests at once; ``abort_request`` ends a request wherever it is.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tt_models.checkpoints import Checkpoint, load_hf_checkpoint
from tt_models.engine.config import EngineConfig, decoder_config
from tt_models.engine.detokenizer import IncrementalDetokenizer
from tt_models.engine.intake import RequestIntake
from tt_models.engine.logits_processors import LogitsRules
from tt_models.engine.model_runner import ModelRunner
from tt_models.engine.outputs import RequestOutput
from tt_models.engine.prompts import PromptType
from tt_models.engine.request import Request, RequestStatus, Sequence
from tt_models.engine.sampler import Sampler
from tt_models.engine.sampling import RequestOutputKind, SamplingParams
from tt_models.engine.scheduler import Scheduler, SchedulerOutput
from tt_models.engine.structured_output import GrammarCompiler


def _eos_token_ids(checkpoint: Checkpoint) -> list[int]:
    """The ids that end generation, "the" eos first: the generation config's, else the (text) model config's.
    Llama 3 instruct models list several (``<|end_of_text|>``, ``<|eom_id|>``, ``<|eot_id|>``)."""
    for source in (checkpoint.generation_config, decoder_config(checkpoint.config)):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
    return []


class LLMEngine(RequestIntake[Request]):
    decodes = True  # an encode instance's engine (tt_models.disagg) does not

    def __init__(self, checkpoint: Checkpoint, config: EngineConfig, *, backend: str | None = None,
                 optimizations: str | None = None, generator: Any = None,
                 mesh_shape: tuple[int, int] | None = None) -> None:
        super().__init__(checkpoint, config)
        eos_ids = _eos_token_ids(checkpoint)
        self.eos_token_id = eos_ids[0] if eos_ids else None
        self.other_eos_ids = eos_ids[1:]  # stop tokens of every request, as vLLM adds them
        rules = (LogitsRules.from_generation_config(checkpoint.generation_config)
                 if checkpoint.generation_config is not None else None)
        self.sampler = Sampler(rules)
        self.grammars = GrammarCompiler(self.tokenizer, self.processor.vocab_size, eos_ids)
        # Greedy decode steps sample on the device when asked and the model can (TT vLLM's sample_on_device_mode:
        # tokens, not [B, V] logits, come back); the model's logits rules (Whisper's) need the host.
        self.sample_on_device = config.sample_on_device and self.sampler.rules.is_empty
        self.runner = ModelRunner(checkpoint, self.config, backend=backend, optimizations=optimizations,
                                  generator=generator, mesh_shape=mesh_shape)
        self.config = self.runner.config  # with the KV pool sized once the model's weights are on the device
        capabilities = getattr(type(self.runner.model), "model_capabilities", {})
        # (As TT vLLM's plugin: a class caches prefixes only when it says it can.)
        self.scheduler = Scheduler(self.config, self.runner.kv_windows,
                                   model_caches_prefixes=capabilities.get("supports_prefix_caching", False))
        if config.sample_on_device and not capabilities.get("supports_sample_on_device"):
            raise ValueError(f"sample_on_device: {type(self.runner.model).__name__} does not declare "
                             "supports_sample_on_device")
        # Encoder outputs computed by encode instances (tt_models.disagg.EncoderInbox), or None: encoders run here.
        self.encoder_inbox: Any = None
        self._pending: list[tuple[Sequence, int, Any]] = []  # sampled, not yet detokenized nor stop-checked
        # Async decode leaves a decode step in flight while the next one is scheduled and its inputs prepared. Sampled
        # on the device by a model that feeds its tokens back (``supports_async_decode``), the next one is launched
        # before the step in flight is read (TT vLLM's async decode), so the device never waits for the host; else the
        # host reads and samples the step in flight, writes its tokens into the next one's inputs and launches it.
        self._feeds_back = config.async_decode and bool(capabilities.get("supports_async_decode"))
        self._inflight: tuple[SchedulerOutput, Any] | None = None  # (the step, the runner's launch) not read yet
        self._compiling: list[Request] = []  # requests whose grammar was still compiling at the last step
        self._seq_ids = itertools.count()
        self._token_texts: dict[int, str] = {}  # each token's own text, decoded once (see IncrementalDetokenizer)
        self._identity = list(range(self.config.max_num_seqs))  # rows of logits that need no picking
        self.stats = {"prefill_steps": 0, "decode_steps": 0, "prompt_tokens": 0, "generated_tokens": 0}
        # The time between a request's consecutive detokenized tokens, for whoever set a list here and empties it (the
        # server's metrics, after every step); None: not recorded.
        self.inter_token_latencies: list[float] | None = None

    @classmethod
    def from_model(cls, model: str, config: EngineConfig, **kwargs: Any) -> LLMEngine:
        return cls(load_hf_checkpoint(model), config, **kwargs)

    def close(self) -> None:
        self.grammars.close()
        if self.encoder_inbox is not None:
            self.encoder_inbox.stop()
        self.runner.close()

    def set_waker(self, wake: Callable[[], None]) -> None:
        """``wake()`` makes the caller's loop run :meth:`service` soon (called from other threads)."""
        if self.encoder_inbox is not None:
            self.encoder_inbox.connector.wake = wake

    def service(self) -> list[RequestOutput]:
        """Work between model steps that produces no tokens: encoder outputs received from encode instances."""
        if self.encoder_inbox is not None:
            self.encoder_inbox.poll()
        return []

    # Requests.

    def add_request(self, request_id: str, prompt: PromptType, params: SamplingParams | None = None, *,
                    arrival_time: float | None = None, language: str | None = None,
                    task: str | None = None, previous_text: str | None = None,
                    max_tokens_param: str | None = None) -> Request:
        """Queue a request. Raises ValueError (naming the problem) for a bad prompt or parameters, and for a
        request that could never fit in the KV pool; nothing is queued then. ``max_tokens_param``: see
        ``RequestIntake._accept`` (the server's strict ``max_tokens``)."""
        params, inputs = self._accept(request_id, prompt, params, language=language, task=task,
                                      previous_text=previous_text, max_tokens_param=max_tokens_param)
        extra_stops = [t for t in self.other_eos_ids if t not in params.stop_token_ids]
        if extra_stops and not params.ignore_eos:  # vLLM's update_from_generation_config
            params = dataclasses.replace(params, stop_token_ids=[*params.stop_token_ids, *extra_stops])
        request = Request(request_id, inputs, params, time.monotonic() if arrival_time is None else arrival_time,
                          self.eos_token_id, self.config.max_model_len)
        if request.alignment_heads is not None:
            self.runner.check_cross_heads(request.alignment_heads)
        if params.n > self.config.max_num_seqs:
            raise ValueError(f"n={params.n} sequences exceed max_num_seqs={self.config.max_num_seqs}")
        kv = self.scheduler.kvs[0]  # every replica's pool has the same size
        # (every KV-cache group's table holds all of a prompt it admits, a recomputed one's outputs included)
        worst = params.n * kv.num_groups * kv.num_blocks_for(len(inputs.prompt_token_ids) + request.max_new_tokens) \
            + kv.num_blocks_for(inputs.encoder_len)
        if worst > kv.num_blocks:
            raise ValueError(f"request {request_id!r} may need {worst} KV blocks (n={params.n}, up to "
                             f"{len(inputs.prompt_token_ids) + request.max_new_tokens} tokens each) but the pool "
                             f"has {kv.num_blocks}; lower n or max_tokens")
        queue_limit = self.config.max_num_waiting
        if queue_limit is not None and len(self.scheduler.waiting) >= queue_limit:
            raise OverflowError(f"the waiting queue is full ({queue_limit} requests)")
        if params.structured_outputs is not None:  # checked here (a bad one raises), compiled on a worker thread
            request.grammar = self.grammars.submit(params.structured_outputs)
            self._compiling.append(request)
        replica = None
        if self.encoder_inbox is not None and inputs.encoder_len:
            replica = self.encoder_inbox.claim(request_id, inputs.encoder_len)
        if replica is None:
            self.scheduler.place(request)
        else:  # an encode instance's output is in cross blocks reserved for it on that replica
            request.replica, request.encoder_cached = replica, True
        request.seqs.append(self._new_seq(request, 0))
        self.requests[request_id] = request
        self.scheduler.add(request)
        return request

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """End a request now (finish reason "abort") and free its blocks; None if it is unknown or finished."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        live = request.live_seqs
        self._finish(request)
        for seq in live:
            seq.finish_reason = "abort"
            self.runner.remove(seq)
        return request.output()

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    # Steps.

    def step(self) -> list[RequestOutput]:
        """One model step; returns the outputs of every request that advanced (finished ones included).

        With ``async_decode`` a decode step is left in flight: while the device computes, the next one is scheduled
        and its inputs prepared, and the tokens sampled before are detokenized and checked for stops; then the step
        in flight is read and sampled, its tokens written into the next one's inputs, and that one launched (when it
        runs the same sequences). Sampled on the device by a model that feeds its tokens back, the next one is
        launched before the step in flight is read. Outputs lag two steps, and a sequence that turns out to have
        stopped may run two more steps, whose tokens are discarded.
        """
        failed = self._compiled() if self._compiling else []
        return failed + self._step()

    def _compiled(self) -> list[RequestOutput]:
        """Take the requests whose grammar finished compiling off the watch list; those whose compile failed end
        with that error (the others keep running)."""
        outputs = []
        for request in [r for r in self._compiling if r.grammar.done()]:
            self._compiling.remove(request)
            error = request.grammar.exception()
            if error is not None and self.requests.get(request.request_id) is request:  # (not aborted meanwhile)
                output = self.abort_request(request.request_id)
                output.error = ValueError(f"request {request.request_id!r}: its structured outputs grammar failed "
                                          f"to compile: {error}")
                outputs.append(output)
        return outputs

    def _step(self) -> list[RequestOutput]:
        self.service()
        drained: list[RequestOutput] = []
        if self._inflight is not None and not self.scheduler.decodes_next([s for s, _ in self._inflight[0].scheduled]):
            drained = self._drain()  # the next step changes the batch: the device's tokens are needed first
        out = self.scheduler.schedule()
        for seq in out.preempted:
            self.runner.remove(seq)
        if out.scheduled and not out.is_prefill and self.config.async_decode:
            on_device, previous = self._on_device(out), self._inflight
            self.stats["decode_steps"] += 1
            if on_device and self._feeds_back:  # launched first: the device feeds the step in flight's tokens back
                self._inflight = (out, self.runner.launch(out, self.scheduler.kvs, on_device,
                                                          ahead=previous is not None))
                outputs = self._commit()  # the tokens sampled before, while the device computes
                if previous is not None:
                    self._pending = self._read(previous)
                return self._merge(drained, outputs)
            committed: list[RequestOutput] = []

            def feed() -> None:
                """Once this step's inputs are prepared: the tokens sampled before detokenized and checked while the
                device computes, then the step in flight read and sampled, its tokens into this step's inputs."""
                committed.extend(self._commit())
                if previous is not None:
                    self._pending = self._read(previous)

            self._inflight = (out, self.runner.launch(out, self.scheduler.kvs, on_device, ahead=previous is not None,
                                                      feed=feed))
            return self._merge(drained, committed)
        outputs = self._merge(drained, self._commit())
        out.scheduled = [(seq, tokens) for seq, tokens in out.scheduled if not seq.finished]  # stopped just now
        if not out.scheduled:
            if out.swap_out or out.swap_in:  # nothing to run this step, but the blocks moved
                self.runner.execute_swaps(out)
            return outputs
        if out.is_prefill:
            logits, model_rows = self.runner.prefill(out, self.scheduler.kvs), None
        else:
            logits, model_rows = self.runner.collect(self.runner.launch(out, self.scheduler.kvs,
                                                                        self._on_device(out)))
        self.stats["prefill_steps" if out.is_prefill else "decode_steps"] += 1
        self._pending = self._sample(out, logits, model_rows)
        return self._merge(outputs, self._commit())

    def _drain(self) -> list[RequestOutput]:
        """Read the decode step in flight; the tokens sampled before it are committed first, so that a sequence they
        stop has its token from the step in flight discarded."""
        inflight, self._inflight = self._inflight, None
        outputs = self._commit()
        self._pending = self._read(inflight)
        return outputs

    def _read(self, inflight: tuple[SchedulerOutput, Any]) -> list[tuple[Sequence, int, Any]]:
        """:meth:`_sample` of a launched decode step ``(out, launched)``: the bookkeeping that needs no output first,
        while the device may still compute, then its output (waiting for the device)."""
        out, launched = inflight
        picked = self._picked(out)
        return self._draw(picked, *self.runner.collect(launched))

    def _on_device(self, out: SchedulerOutput) -> bool:
        """Whether this decode step's tokens are sampled on the device: with ``sample_on_device``, when every
        sequence takes the plain argmax (the device's greedy sampling gives the host's tokens)."""
        return self.sample_on_device and all(seq.state.plain_greedy for seq, _ in out.scheduled)

    def _sample(self, out: SchedulerOutput, logits: torch.Tensor,
                model_rows: np.ndarray | None = None) -> list[tuple[Sequence, int, Any]]:
        """Sample each sequence's next token and make it the sequence's next input; detokenizing and stop checks
        are :meth:`_commit`'s. ``logits [B, V]``, or the tokens ``[B]`` the device sampled; ``model_rows[i]``: the
        row of the ``i``-th scheduled sequence in them (None: row ``i``)."""
        return self._draw(self._picked(out), logits, model_rows)

    def _picked(self, out: SchedulerOutput) -> tuple[list[Sequence], list[int], list[int]]:
        """The bookkeeping of :meth:`_sample` that needs no model output: the step's tokens are now computed, and
        the sequences that get a token, each with its index in ``out.scheduled`` and its batch row. A step that
        completes a prompt (a prefill, or a decode step running a chunked prompt's last token) forks the other
        ``n - 1`` sequences."""
        rows: list[int] = []
        seqs: list[Sequence] = []
        is_prefill = out.is_prefill
        for i, (seq, tokens) in enumerate(out.scheduled):
            if seq.finish_reason is not None:
                continue  # it stopped (or was aborted) after this step was issued: its token is discarded
            seq.num_computed += tokens
            seq.redo_last_block = False
            if is_prefill:
                seq.request.encoder_cached = True
                self.stats["prompt_tokens"] += tokens
                self.scheduler.cache_computed(seq)
                if seq.num_computed < len(seq.token_ids):
                    continue  # a prefill chunk that is not the last
            request = seq.request
            if len(request.seqs) < request.params.n:  # the prompt is done: fork the other n - 1
                family = [seq] + [self._fork(seq, index) for index in range(1, request.params.n)]
                rows += [i] * len(family)
                seqs += family
            else:
                rows.append(i)
                seqs.append(seq)
        return seqs, rows, self.runner.token_rows(seqs)

    def _draw(self, picked: tuple[list[Sequence], list[int], list[int]], logits: torch.Tensor,
              model_rows: np.ndarray | None) -> list[tuple[Sequence, int, Any]]:
        """The tokens of the sequences :meth:`_picked` gave, from the step's output (see :meth:`_sample`)."""
        seqs, rows, token_rows = picked
        if not seqs:
            return []
        if model_rows is not None:
            rows = model_rows[rows].tolist()
        if logits.dim() == 1:  # sampled on the device (picked in Python: torch's indexing by a list costs 10x)
            device_tokens = logits.tolist()
            tokens, logprobs = [device_tokens[row] for row in rows], [None] * len(seqs)
        else:  # forks repeat a row; finished chunks, stopped sequences and other replicas' slots are rows left out
            sampled = self.sampler.sample(logits, [s.state for s in seqs],
                                          None if rows == self._identity[:len(logits)] else rows)
            tokens, logprobs = sampled.tokens.tolist(), sampled.logprobs
        now = time.monotonic()
        for seq, token in zip(seqs, tokens):
            if not seq.output_token_ids:
                metrics = seq.request.metrics
                if metrics.first_token_time is None:
                    metrics.first_token_time = now
            seq.add_token(token)
        self.runner.append_tokens(token_rows, tokens)
        return list(zip(seqs, tokens, logprobs))

    def _commit(self) -> list[RequestOutput]:
        """Detokenize the sampled tokens and check stops: finished sequences and requests give back their blocks."""
        pending, self._pending = self._pending, []
        touched: dict[str, Request] = {}
        ended: list[Request] = []  # requests a sequence of which finished now
        committed = 0
        for seq, token, logprobs in pending:
            request = seq.request
            if seq.finish_reason is not None or request.request_id not in self.requests:
                continue  # aborted meanwhile
            seq.commit_token(token, logprobs)
            committed += 1
            touched[request.request_id] = request
            if seq.finish_reason is not None:
                ended.append(request)
                self.runner.remove(seq)
                if request.alignment_heads is not None and request.status is RequestStatus.RUNNING:
                    # Before its request's cross blocks are freed (a preempted request no longer holds them).
                    kv = self.scheduler.kvs[request.replica]
                    seq.alignment_weights = self.runner.cross_attention_weights(seq, kv)
                if request.status is not RequestStatus.WAITING:  # preempted since it was sampled: holds nothing
                    self.scheduler.free_seq(seq)
        self.stats["generated_tokens"] += committed
        now = time.monotonic()
        for request in touched.values():
            last, request.metrics.last_token_time = request.metrics.last_token_time, now
            if last is not None and self.inter_token_latencies is not None:
                self.inter_token_latencies.append(now - last)
        for request in ended:
            if request.request_id in self.requests and not request.live_seqs and len(request.seqs) == request.params.n:
                self.requests.pop(request.request_id)
                self._finish(request)
        return [request.output() for request in touched.values()
                if request.params.output_kind is RequestOutputKind.CUMULATIVE
                or request.status is RequestStatus.FINISHED]

    @staticmethod
    def _merge(first: list[RequestOutput], then: list[RequestOutput]) -> list[RequestOutput]:
        """Outputs of two commits; a request in both is reported once, with its latest output."""
        if not first or not then:  # (a commit reports each request once: nothing to merge)
            return first or then
        latest = {o.request_id: o for o in first}
        latest.update((o.request_id, o) for o in then)
        return list(latest.values())

    def _new_seq(self, request: Request, index: int) -> Sequence:
        params = request.child_params(index)
        detokenizer = IncrementalDetokenizer(self.tokenizer, request.inputs.prompt_token_ids,
                                             params.skip_special_tokens, self._token_texts)
        return Sequence(next(self._seq_ids), request, index, params, detokenizer)

    def _fork(self, parent: Sequence, index: int) -> Sequence:
        child = self._new_seq(parent.request, index)
        child.token_ids = list(parent.token_ids)
        child.num_computed, child.num_scheduled = parent.num_computed, parent.num_scheduled
        self.scheduler.fork(parent, child)
        parent.request.seqs.append(child)
        return child

    def _finish(self, request: Request) -> None:
        self.scheduler.finish(request)
        request.metrics.finished_time = time.monotonic()
