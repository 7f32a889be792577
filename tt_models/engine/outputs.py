"""What ``LLM.generate`` returns: vLLM's ``RequestOutput`` and ``CompletionOutput`` (names and fields of
vLLM 0.25.1 ``vllm/outputs.py``), plus per-request timing in ``RequestMetrics``.

For encoder-decoder models ``prompt`` / ``prompt_token_ids`` are the decoder prompt and ``encoder_prompt`` /
``encoder_prompt_token_ids`` the encoder's (Whisper's encoder takes audio: its token ids are empty).

The classes built per step have slots: a stream builds a ``RequestOutput`` and a ``CompletionOutput`` for every
request at every step (and a ``Logprob`` for every reported token), and slotted ones build in half the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Logprob:
    """vLLM's ``Logprob``: a token's log probability, its rank and its text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass(slots=True)
class CompletionOutput:
    """One generated sequence of a request (``index`` < ``n``)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None
    # tt-models: with ``extra_args={"alignment_heads": [[layer, head], ...]}``, once finished, the cross-attention
    # probabilities of those heads over its tokens but the last (prompt and output, as a teacher-forced pass sees
    # them): a host tensor [heads, tokens, encoder positions] (Whisper's word timestamps).
    alignment_weights: object = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """Wall-clock times (``time.monotonic()``) of a request's life, and how often it was preempted."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None  # when its latest token was detokenized
    finished_time: float | None = None
    num_preemptions: int = 0

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: None
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    encoder_prompt: str | None = None
    encoder_prompt_token_ids: list[int] | None = None
    num_cached_tokens: int = 0
    kv_transfer_params: None = field(default=None, repr=False)
    # tt-models: the request failed on its way (an encoder output lost between instances); its stream raises it.
    error: BaseException | None = field(default=None, repr=False)
