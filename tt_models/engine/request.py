"""A request and its sequences as the engine tracks them (vLLM v0's sequence group, v1's request).

A request starts with one sequence; with ``n > 1`` it forks into ``n`` once its prompt is computed: the
children share the prompt's KV blocks and the request's one cross table, and each gets its own seed
(``seed + index``, as vLLM's parallel sampling does).
"""

from __future__ import annotations

import dataclasses
import enum
from concurrent.futures import Future
from typing import TYPE_CHECKING

from tt_models.engine.detokenizer import IncrementalDetokenizer
from tt_models.engine.inputs import ProcessedInputs
from tt_models.engine.logprobs import TokenLogprobs
from tt_models.engine.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from tt_models.engine.sampling import RowState, SamplingParams
from tt_models.engine.stop_checks import check_stop
from tt_models.engine.structured_output import Guide

if TYPE_CHECKING:
    from xgrammar import CompiledGrammar


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # not admitted, or preempted by recomputation
    RUNNING = "running"  # its blocks are on the device
    SWAPPED = "swapped"  # preempted by swapping: its blocks are in host memory
    FINISHED = "finished"


class Sequence:
    """One output sequence: the decoder tokens (prompt, then output), how many are in the KV cache, and
    its sampling and detokenization state."""

    def __init__(self, seq_id: int, request: Request, index: int, params: SamplingParams,
                 detokenizer: IncrementalDetokenizer) -> None:
        self.seq_id = seq_id
        self.request = request
        self.index = index
        self.key = f"{request.request_id}#{index}"  # its row's name in the input batch
        self.token_ids = list(request.inputs.prompt_token_ids)
        self.num_computed = 0  # tokens whose K/V is in the cache
        # Tokens scheduled so far: num_computed and those of a step in flight (counted when it is scheduled; a
        # decode step issued before the last is read runs the token after num_computed's).
        self.num_scheduled = 0
        self.redo_last_block = False  # its copy of a shared last block must be recomputed (copy-on-write)
        # Outputs survive preemption (swapped or recomputed), so the guide, fed each token once, stays in step.
        guide = None if request.grammar is None else Guide(request.grammar, self.key)
        self.state = RowState(params, request.inputs.prompt_token_ids, eos_token_id=request.eos_token_id, guide=guide)
        self.output_token_ids = self.state.output_token_ids  # the same list: the sampler's penalties read it
        self.detokenizer = detokenizer
        # Without stop strings no step needs the text: the detokenizer catches up when an output is built
        # (every step for streamed outputs, once at the end for final ones), off the per-token path.
        self.lazy_text = not params.stop
        # check_stop_tokens' terms: the tokens that stop it, each with its stop reason (eos's is None and wins)
        self._stop_reasons: dict[int, int | None] = {t: t for t in params.stop_token_ids}
        if request.eos_token_id is not None and not params.ignore_eos:
            self._stop_reasons[request.eos_token_id] = None
        self._min_tokens = params.min_tokens
        self._max_tokens = float("inf") if params.max_tokens is None else params.max_tokens
        self._text = ""
        self.logprobs: list[dict[int, Logprob]] | None = [] if params.num_logprobs is not None else None
        self.cumulative_logprob = 0.0 if params.num_logprobs is not None else None
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.alignment_weights: object = None  # see CompletionOutput.alignment_weights

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed

    @property
    def needs_prefill(self) -> bool:
        """A decode step runs exactly one token after a computed prefix; anything else is a prefill."""
        computed = self.num_computed  # (inline: the scheduler asks this of every sequence at every step)
        return computed == 0 or len(self.token_ids) - computed > 1 or self.redo_last_block

    def append_token(self, token_id: int, logprobs: TokenLogprobs | None) -> None:
        """Record a sampled token, detokenize it and check whether the sequence is done."""
        self.add_token(token_id)
        self.commit_token(token_id, logprobs)

    def add_token(self, token_id: int) -> None:
        """A sampled token as the sequence's next input (and for the sampling penalties), before
        :meth:`commit_token`: the engine may run the next step first."""
        self.token_ids.append(token_id)
        self.output_token_ids.append(token_id)
        if self.state.guide is not None:
            self.state.guide.accept(token_id)

    def commit_token(self, token_id: int, logprobs: TokenLogprobs | None) -> None:
        """Detokenize the token :meth:`add_token` added last (unless the text is built lazily), record its logprobs
        and check stops."""
        if logprobs is not None:
            self.cumulative_logprob += logprobs.logprob
            entry = {tok: Logprob(lp, rank + 1, self.detokenizer.decode_token(tok))
                     for rank, (tok, lp) in enumerate(logprobs.top)}
            entry[token_id] = Logprob(logprobs.logprob, logprobs.rank, self.detokenizer.decode_token(token_id))
            self.logprobs.append(entry)
        if self.lazy_text:
            # check_stop_tokens inline, on what the sequence knows from the start (every token, every step)
            n = len(self.output_token_ids)
            if n >= self._min_tokens:
                if token_id in self._stop_reasons:
                    self.finish_reason, self.stop_reason = "stop", self._stop_reasons[token_id]
                elif n >= self._max_tokens:
                    self.finish_reason = "length"
            return
        added = self.detokenizer.step(token_id)
        stop = check_stop(self.output_token_ids, self.detokenizer.text, self.state.params, self.request.eos_token_id,
                          new_text_len=added)
        self._text = stop.text
        if stop.finished:
            self.finish_reason, self.stop_reason = stop.reason, stop.stop_reason

    @property
    def text(self) -> str:
        """The output text, cut as vLLM returns it (a stop token's own text left out unless asked for)."""
        if not self.lazy_text:
            return self._text
        end = len(self.output_token_ids)
        if self.finish_reason == "stop" and not self.state.params.include_stop_str_in_output:
            end -= 1
        detokenizer = self.detokenizer
        for token_id in self.output_token_ids[detokenizer.num_tokens:end]:
            detokenizer.step(token_id)
        return detokenizer.text

    def completion(self) -> CompletionOutput:
        return CompletionOutput(self.index, self.text, list(self.output_token_ids), self.cumulative_logprob,
                                None if self.logprobs is None else list(self.logprobs), self.finish_reason,
                                self.stop_reason, self.alignment_weights)


class Request:
    """A submitted prompt with its sampling parameters; ``seqs`` grows to ``n`` after the prompt."""

    def __init__(self, request_id: str, inputs: ProcessedInputs, params: SamplingParams, arrival_time: float,
                 eos_token_id: int | None, max_model_len: int) -> None:
        self.request_id = request_id
        self.inputs = inputs
        self.params = params
        # The [layer, head] pairs whose cross-attention weights each sequence gets when it finishes (word timestamps).
        self.alignment_heads: list[list[int]] | None = (params.extra_args or {}).get("alignment_heads")
        # Its structured outputs constraint, which each sequence follows, compiling until the future is done.
        self.grammar: Future[CompiledGrammar] | None = None
        self.eos_token_id = eos_token_id
        self.status = RequestStatus.WAITING
        self.replica = 0  # the data-parallel replica it runs on, for its whole life (Scheduler.place)
        self.seqs: list[Sequence] = []
        self.encoder_cached = False  # its cross K/V is in its cross blocks
        # Image+text models: (cross_attention_mask, full_text_row_masked_out_mask) from the prefill that wrote its
        # cross K/V, handed back at every later step (see tt_models/models/mllama/generator.py).
        self.vision_masks: tuple[object, object] = (None, None)
        # M-RoPE models (Qwen2.5-VL): the rope delta its prefill returned, handed back at every decode step.
        self.rope_delta = 0
        self.metrics = RequestMetrics(arrival_time)
        self.block_keys: list[bytes] | None = None  # its prompt's full-block keys (prefix caching), once needed
        self.num_cached_tokens = 0  # prompt tokens found in the prefix cache when it was first admitted
        # No sequence may outgrow the model's context, whatever max_tokens says.
        room = max_model_len - len(inputs.prompt_token_ids)
        self.max_new_tokens = room if params.max_tokens is None else min(params.max_tokens, room)

    @property
    def ready(self) -> bool:
        """It can be scheduled: it has no grammar or its grammar is compiled."""
        return self.grammar is None or self.grammar.done()

    @property
    def encoder_len(self) -> int:
        return self.inputs.encoder_len

    @property
    def prefill_tokens(self) -> int:
        """The tokens its next prefill step computes whole: its encoder's input (unless computed already) and its first
        live sequence's uncomputed tokens."""
        seqs = self.live_seqs
        return (0 if self.encoder_cached else self.encoder_len) + (seqs[0].num_uncomputed if seqs else 0)

    @property
    def live_seqs(self) -> list[Sequence]:
        return [s for s in self.seqs if s.finish_reason is None]  # (not the property: this runs every step)

    @property
    def num_slots(self) -> int:
        """Batch slots it holds: one per live sequence, and the ``n - 1`` its prompt will fork into."""
        return self.params.n - len(self.seqs) + len(self.live_seqs)

    def child_params(self, index: int) -> SamplingParams:
        """Sequence ``index``'s parameters: a seeded request's children draw from ``seed + index``, and every
        sequence stops at the context limit."""
        seed = None if self.params.seed is None else self.params.seed + index
        return dataclasses.replace(self.params, seed=seed, max_tokens=self.max_new_tokens)

    def output(self) -> RequestOutput:
        inputs = self.inputs
        return RequestOutput(self.request_id, inputs.prompt, list(inputs.prompt_token_ids), None,
                             [s.completion() for s in self.seqs], self.status is RequestStatus.FINISHED,
                             self.metrics, inputs.encoder_prompt,
                             None if inputs.encoder_prompt_token_ids is None else list(inputs.encoder_prompt_token_ids),
                             self.num_cached_tokens)
