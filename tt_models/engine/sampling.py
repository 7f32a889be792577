"""A request's sampling: vLLM's ``SamplingParams`` and the state each request's row keeps across steps (the sampler
that reads them is ``tt_models.engine.sampler``; the stop checks are ``tt_models.engine.stop_checks``).

The model hands back float32 logits ``[B, V]`` per step and the engine picks tokens from them. Names, defaults and
validation follow vLLM 0.25.1's ``vllm/sampling_params.py`` so that requests behave as they would under vLLM. vLLM
itself is not imported: the engine must run without it.
"""

from __future__ import annotations

import enum
import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tt_models.engine.structured_output import Guide, StructuredOutputsParams

logger = logging.getLogger(__name__)

_SAMPLING_EPS = 1e-5  # temperatures below this are greedy
_MAX_TEMP = 1e-2  # smaller positive temperatures are raised to this (they overflow the softmax)
_MAX_N = 16384  # vLLM's default VLLM_MAX_N_SEQUENCES
MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's bound on len(logprob_token_ids)


class RequestOutputKind(enum.IntEnum):
    """vLLM's: which outputs a request gets while it runs (vLLM's DELTA is not offered: the server derives its
    stream's deltas from cumulative outputs)."""

    CUMULATIVE = 0  # after every step, everything so far
    FINAL_ONLY = 2  # once, when it finishes (what ``LLM.generate`` asks: no output is built per step)


@dataclass
class SamplingParams:
    """vLLM's sampling parameters (the subset the engine serves), validated as vLLM does.

    ``stop`` becomes a list and ``stop_token_ids`` a list after construction; ``top_k`` 0 or -1 and
    ``top_p`` 1 mean "no filter"; ``max_tokens=None`` leaves the length to the model's context.
    ``allowed_token_ids`` restricts every sampled token to those ids (the others' logits are -inf before the
    penalties, as vLLM masks them). ``logprob_token_ids`` asks for the raw logprobs of exactly those ids at
    each step, beside the sampled token's (vLLM's scoring of label tokens, e.g. Whisper's languages).
    ``extra_args`` is vLLM's field for what custom sampling code reads; here ``{"timestamps": True}`` asks for
    Whisper's timestamp rules (``logits_processors.TimestampRules``) on the request, ignored by models without them.
    ``structured_outputs`` constrains the output to a JSON schema, regex, choice or grammar
    (``tt_models.engine.structured_output``).
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    allowed_token_ids: list[int] | None = None
    logprob_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    structured_outputs: StructuredOutputsParams | None = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE

    def __post_init__(self) -> None:
        if 0 < self.temperature < _MAX_TEMP:
            logger.warning("temperature %s is less than %s, which may cause numerical errors nan or inf in "
                           "tensors. We have maxed it out to %s.", self.temperature, _MAX_TEMP, _MAX_TEMP)
            self.temperature = _MAX_TEMP
        if self.seed == -1:
            self.seed = None
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        if self.logprobs is True:
            self.logprobs = 1
        self._verify_args()
        if self.greedy:
            self.top_p, self.top_k, self.min_p = 1.0, 0, 0.0
            if self.n > 1:
                raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")

    def _verify_args(self) -> None:
        """vLLM's ``SamplingParams._verify_args``, with its messages."""
        if not isinstance(self.n, int):
            raise ValueError(f"n must be an int, but is of type {type(self.n)}")
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.n > _MAX_N:
            raise ValueError(f"n must be at most {_MAX_N}, got {self.n}.")
        # What a torch.Generator takes (vLLM 0.25.1 does not check it; its runner fails with "Overflow when
        # unpacking long long" later, for the whole batch).
        if self.seed is not None and not -2**63 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [-2**63, 2**64), got {self.seed}.")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if not math.isfinite(self.repetition_penalty):
            raise ValueError(f"repetition_penalty must be a finite number, got {self.repetition_penalty}.")
        if self.repetition_penalty <= 0.0:
            raise ValueError(f"repetition_penalty must be greater than zero, got {self.repetition_penalty}.")
        if not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be a finite number, got {self.temperature}.")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if self.temperature > 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:  # vLLM quietly accepts -1 as "disabled" but prefers 0
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if not isinstance(self.top_k, int):
            raise TypeError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens must be greater than or equal to 0, got {self.min_tokens}.")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, "
                             f"got {self.min_tokens}.")
        if self.logprobs is not None and self.logprobs != -1 and self.logprobs < 0:
            raise ValueError(f"logprobs must be non-negative or -1, got {self.logprobs}.")
        for name in ("stop_token_ids", "allowed_token_ids", "logprob_token_ids"):
            ids = getattr(self, name)
            if ids is not None and not all(isinstance(t, int) for t in ids):
                raise ValueError(f"{name} must contain only integers, got {ids}.")
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            raise ValueError(f"structured_outputs must be a StructuredOutputsParams, got "
                             f"{type(self.structured_outputs).__name__}")
        if any(not s for s in self.stop):
            raise ValueError("stop cannot contain an empty string.")
        if self.allowed_token_ids is not None and len(self.allowed_token_ids) == 0:
            raise ValueError("allowed_token_ids is not None and empty!")
        if self.logprob_token_ids is not None:
            n = len(self.logprob_token_ids)
            if n > MAX_LOGPROB_TOKEN_IDS:
                raise ValueError(f"Requested logprob_token_ids of length {n}, which is greater than max allowed: "
                                 f"{MAX_LOGPROB_TOKEN_IDS}")
            if self.logprobs is not None and self.logprobs != n:
                raise ValueError(f"When both logprobs and logprob_token_ids are set, logprobs must equal "
                                 f"len(logprob_token_ids). Got logprobs={self.logprobs}, len(logprob_token_ids)={n}.")

    def verify(self, vocab_size: int, tokenizer_size: int | None = None) -> None:
        """vLLM's checks against the model (``SamplingParams.verify``): token ids within the vocabulary, the
        tokenizer's for ``allowed_token_ids`` (and the logits', where a tokenizer has more), the model's for
        ``logprob_token_ids``."""
        if self.allowed_token_ids is not None:
            size = vocab_size if tokenizer_size is None else min(vocab_size, tokenizer_size)
            if any(not 0 <= t < size for t in self.allowed_token_ids):
                raise ValueError("allowed_token_ids contains out-of-vocab token id!")
        if self.logprob_token_ids is not None:
            bad = [t for t in self.logprob_token_ids if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"token_id(s) {bad} in logprob_token_ids contain out-of-vocab token ids. "
                                 f"Vocabulary size: {vocab_size}")

    @property
    def num_logprobs(self) -> int | None:
        """Logprobs returned per output token (None: none): ``logprobs``, else ``len(logprob_token_ids)``."""
        if self.logprobs is not None:
            return self.logprobs
        return len(self.logprob_token_ids) if self.logprob_token_ids else None

    @property
    def greedy(self) -> bool:
        return self.temperature < _SAMPLING_EPS


class SeenIds:
    """Distinct token ids in first-seen order, as a numpy array grown a token at a time (the repetition penalty reads
    them every step: no per-step conversion from Python containers)."""

    def __init__(self, token_ids: Sequence[int] = ()) -> None:
        first = dict.fromkeys(token_ids)  # (in first-seen order)
        self._at = dict(zip(first, range(len(first))))  # id -> its entry
        self._ids = np.zeros(max(64, 2 * len(first)), dtype=np.int64)
        self._ids[:len(first)] = list(first)

    def __len__(self) -> int:
        return len(self._at)

    def add(self, token: int) -> int:
        """Record ``token``; returns its entry."""
        at = self._at.get(token)
        if at is None:
            at = self._at[token] = len(self._at)
            if at == len(self._ids):
                self._grow()
            self._ids[at] = token
        return at

    def _grow(self) -> None:
        self._ids = np.concatenate([self._ids, np.zeros_like(self._ids)])

    @property
    def ids(self) -> np.ndarray:
        return self._ids[:len(self._at)]


class IdCounts(SeenIds):
    """:class:`SeenIds` with each id's count (the frequency and presence penalties')."""

    def __init__(self, token_ids: Sequence[int] = ()) -> None:
        super().__init__(token_ids)
        counts = Counter(token_ids)  # (in first-seen order, as the ids)
        self._counts = np.zeros(len(self._ids), dtype=np.float32)  # (float32: the penalties' dtype; exact below 2**24)
        self._counts[:len(counts)] = list(counts.values())

    def add(self, token: int) -> int:
        at = super().add(token)
        self._counts[at] += 1
        return at

    def _grow(self) -> None:
        super()._grow()
        self._counts = np.concatenate([self._counts, np.zeros_like(self._counts)])

    @property
    def counts(self) -> np.ndarray:
        return self._counts[:len(self._at)]


@dataclass
class RowState:
    """One request's sampling state, kept by the engine for the request's lifetime.

    The engine appends each sampled token to ``output_token_ids``. A seeded random request owns its
    ``generator`` (seeded once, as vLLM's runner does), so its tokens depend on its seed alone, not on
    the other requests in the batch.
    """

    params: SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: list[int] = field(default_factory=list)
    eos_token_id: int | None = None
    guide: Guide | None = None  # the row's grammar, with structured outputs
    generator: torch.Generator | None = field(init=False, default=None)
    allowed_ids: torch.Tensor | None = field(init=False, default=None)  # the params' lists as index tensors,
    logprob_ids: torch.Tensor | None = field(init=False, default=None)  # built once, not at every step
    timestamps: bool = field(init=False, default=False)  # Whisper's timestamp rules apply to this row
    _timestamps_seen: int = field(init=False, default=0)  # outputs scanned by timestamp_history
    _last_timestamp: int | None = field(init=False, default=None)
    # The penalties' view of the outputs, kept up to date a token at a time (not recounted every step): each
    # output id's count, and every id seen in the prompt or the outputs (the repetition penalty's).
    _counts: IdCounts = field(init=False, default_factory=IdCounts)
    _seen: SeenIds = field(init=False, default_factory=SeenIds)
    _counted: int = field(init=False, default=0)
    # Decided once, not per step: some step may change this row's logits before it is sampled (grammar, allowed
    # ids, min_tokens, penalties, timestamp rules); greedy on the logits as they are, no logprobs (the fast path).
    processed: bool = field(init=False, default=False)
    plain_greedy: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.params.seed is not None and not self.params.greedy:
            self.generator = torch.Generator().manual_seed(self.params.seed)
        if self.params.allowed_token_ids:
            self.allowed_ids = torch.tensor(self.params.allowed_token_ids, dtype=torch.int64)
        if self.params.logprob_token_ids:
            self.logprob_ids = torch.tensor(self.params.logprob_token_ids, dtype=torch.int64)
        if self.params.repetition_penalty != 1.0:
            self._seen = SeenIds(self.prompt_token_ids)
        self.timestamps = bool((self.params.extra_args or {}).get("timestamps"))
        p = self.params
        self.processed = (self.allowed_ids is not None or p.min_tokens > 0 or self.penalized or self.timestamps
                          or self.guide is not None)
        self.plain_greedy = p.greedy and p.num_logprobs is None and not self.processed

    @property
    def penalized(self) -> bool:
        p = self.params
        return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0

    def output_counts(self) -> IdCounts:
        """Each distinct output id's count (in first-output order); only the tokens appended since the last call are
        counted. With a repetition penalty, :attr:`seen_ids` follows along."""
        out, counts = self.output_token_ids, self._counts
        track_seen = self.params.repetition_penalty != 1.0
        for token in out[self._counted:]:
            counts.add(token)
            if track_seen:
                self._seen.add(token)
        self._counted = len(out)
        return counts

    @property
    def seen_ids(self) -> np.ndarray:
        """The distinct ids of the prompt and of the outputs counted by :meth:`output_counts` (repetition only)."""
        return self._seen.ids

    def timestamp_history(self, timestamp_begin: int) -> tuple[int, int, int, int]:
        """What the timestamp rules need of the outputs: (last is a timestamp, the one before is a timestamp or
        absent, the lowest timestamp allowed next, no output yet), as HF's processor computes them. Only the
        tokens appended since the last call are scanned."""
        out = self.output_token_ids
        for token in out[self._timestamps_seen:]:
            if token >= timestamp_begin:
                self._last_timestamp = token
        self._timestamps_seen = len(out)
        last = len(out) >= 1 and out[-1] >= timestamp_begin
        penultimate = len(out) < 2 or out[-2] >= timestamp_begin
        lowest = timestamp_begin
        if self._last_timestamp is not None:  # a segment's end may repeat as the next start, nothing lower
            lowest = self._last_timestamp if last and not penultimate else self._last_timestamp + 1
        return int(last), int(penultimate), lowest, int(not out)
