"""What changes a row's logits before its token is picked, after the grammar's mask, in vLLM 0.25.1's order: the
request's ``allowed_token_ids``, ``min_tokens`` and penalties (``vllm/v1/sample/sampler.py``, ``ops/``), then the
model's fixed rules (:class:`LogitsRules`: Whisper's suppressed tokens and, for the rows that ask, its
:class:`TimestampRules`). Each works in place on the sampler's float32 copy of the rows it changes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tt_models.engine.logits_rows import take_rows
from tt_models.engine.sampling import RowState


def apply_allowed_token_ids(logits: torch.Tensor, rows: Sequence[RowState]) -> None:
    """Every logit of a row outside its ``allowed_token_ids`` becomes -inf (vLLM's ``allowed_token_ids_mask``),
    one ``masked_fill_`` over the batch; rows without the parameter are left alone."""
    limited = [i for i, r in enumerate(rows) if r.allowed_ids is not None]
    if not limited:
        return
    allowed = [rows[i].allowed_ids for i in limited]
    masked = torch.zeros_like(logits, dtype=torch.bool)
    masked[limited] = True
    row_of_id = torch.tensor(limited).repeat_interleave(torch.tensor([len(a) for a in allowed]))
    masked[row_of_id, torch.cat(allowed)] = False
    logits.masked_fill_(masked, -math.inf)


def apply_min_tokens(logits: torch.Tensor, rows: Sequence[RowState]) -> None:
    """Until a row has ``min_tokens`` outputs, its eos and stop_token_ids are -inf (vLLM's
    ``MinTokensLogitsProcessor``; eos counts even with ``ignore_eos``, as in ``all_stop_token_ids``)."""
    row_idx: list[int] = []
    tok_idx: list[int] = []
    for i, r in enumerate(rows):
        if len(r.output_token_ids) < r.params.min_tokens:
            stops = set(r.params.stop_token_ids)
            if r.eos_token_id is not None:
                stops.add(r.eos_token_id)
            row_idx += [i] * len(stops)
            tok_idx += stops
    if row_idx:
        logits[row_idx, tok_idx] = -math.inf


def apply_penalties(logits: torch.Tensor, rows: Sequence[RowState]) -> None:
    """vLLM's ``apply_penalties`` (model_executor/layers/utils.py, torch repetition op in _custom_ops.py):
    repetition over prompt + output (positive logits multiplied by ``1 / penalty``, others by it), then the OpenAI
    ``logit -= frequency * count`` and ``logit -= presence * [count > 0]`` over the output only. The same float32
    operations as vLLM's ``[B, V]`` masks, on the ids the penalized rows have seen, all rows in one gather and one
    scatter per penalty (``logits`` is contiguous: the caller's copy)."""
    assert logits.is_contiguous(), "penalties write through a flat view of the logits"
    vocab = logits.shape[1]
    flat = logits.numpy().reshape(-1)
    seen: list[np.ndarray] = []  # per penalized row: its ids, its row, its penalties
    seen_rows: list[int] = []
    repetition: list[float] = []
    outputs: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    output_rows: list[int] = []
    frequency: list[float] = []
    presence: list[float] = []
    for i, r in enumerate(rows):
        if not r.penalized:
            continue
        p = r.params
        row_counts = r.output_counts()
        if p.repetition_penalty != 1.0:
            seen.append(r.seen_ids)
            seen_rows.append(i)
            repetition.append(p.repetition_penalty)
        if len(row_counts) and (p.frequency_penalty != 0.0 or p.presence_penalty != 0.0):
            outputs.append(row_counts.ids)
            counts.append(row_counts.counts)
            output_rows.append(i)
            frequency.append(p.frequency_penalty)
            presence.append(p.presence_penalty)
    if seen:
        lengths = [len(ids) for ids in seen]
        where = np.concatenate(seen) + np.repeat(np.array(seen_rows, dtype=np.int64) * vocab, lengths)
        penalty = np.repeat(np.array(repetition, dtype=np.float32), lengths)
        values = flat[where]
        flat[where] = values * np.where(values > 0, np.float32(1.0) / penalty, penalty)
    if outputs:
        lengths = [len(ids) for ids in outputs]
        where = np.concatenate(outputs) + np.repeat(np.array(output_rows, dtype=np.int64) * vocab, lengths)
        frequencies = np.repeat(np.array(frequency, dtype=np.float32), lengths)
        flat[where] = ((flat[where] - frequencies * np.concatenate(counts))
                       - np.repeat(np.array(presence, dtype=np.float32), lengths))


@dataclass(frozen=True)
class TimestampRules:
    """Whisper's timestamp decoding rules, as HF's ``WhisperTimeStampLogitsProcessor`` applies them (openai-whisper's
    ``ApplyTimestampRules``), for the rows of requests that decode with timestamp tokens (ids from
    ``timestamp_begin`` on, ``<|0.00|>`` in 0.02 s steps):

    - ``<|notimestamps|>`` is never generated;
    - timestamps come in pairs: after a lone timestamp, no text (only a timestamp or eos); after a pair, no
      timestamp;
    - timestamps never decrease, and a new segment cannot start at the previous one's start (``<|0.00|>`` twice);
    - the first token is a timestamp of at most ``max_initial_timestamp_index`` steps (1.00 s on the hub's configs);
    - when the timestamps together are likelier than any single text token, a timestamp is forced.

    The rules see only the request's generated tokens (HF's ``begin_index`` is the decoder prompt's length).
    """

    timestamp_begin: int
    eos_token_id: int
    max_initial_timestamp_index: int | None = None

    @classmethod
    def from_generation_config(cls, gen_config: Any) -> TimestampRules | None:
        """From a Whisper generation config (``no_timestamps_token_id``); None for models without timestamps."""
        no_timestamps = _config_get(gen_config, "no_timestamps_token_id")
        eos = _config_get(gen_config, "eos_token_id")
        if no_timestamps is None or eos is None:
            return None
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        return cls(no_timestamps + 1, eos, _config_get(gen_config, "max_initial_timestamp_index"))

    def apply(self, logits: torch.Tensor, rows: Sequence[RowState]) -> None:
        """Apply the rules in place to the rows that asked for timestamps (nothing to do when none did).

        Each row's history comes from :meth:`RowState.timestamp_history` (incremental), so the per-step cost
        is a few masks over the timestamp rows, not a scan of their outputs."""
        index = [i for i, r in enumerate(rows) if r.timestamps]
        if not index:
            return
        begin = self.timestamp_begin
        sub = take_rows(logits, index) if len(index) < len(rows) else logits
        vocab = torch.arange(sub.shape[1])
        history = torch.tensor([rows[i].timestamp_history(begin) for i in index], dtype=torch.int64)
        last_ts, penultimate_ts, lowest, first = (history[:, k, None] for k in range(4))
        is_timestamp = vocab >= begin
        masked = (vocab == begin - 1)  # <|notimestamps|>
        masked = masked | (last_ts.bool() & penultimate_ts.bool() & is_timestamp)  # a pair: text or eos next
        masked = masked | (last_ts.bool() & ~penultimate_ts.bool() & (vocab < self.eos_token_id))  # a lone one
        masked = masked | (is_timestamp & (vocab < lowest))  # monotonic
        initial = ~is_timestamp
        if self.max_initial_timestamp_index is not None:
            initial = initial | (vocab > begin + self.max_initial_timestamp_index)
        masked = masked | (first.bool() & initial)
        sub.masked_fill_(masked, -math.inf)
        logprobs = sub.log_softmax(dim=-1)
        timestamp_mass = logprobs[:, begin:].logsumexp(dim=-1)
        best_text = logprobs[:, :begin].max(dim=-1).values
        sub[:, :begin].masked_fill_((timestamp_mass > best_text)[:, None], -math.inf)
        if sub is not logits:
            logits.index_copy_(0, torch.tensor(index), sub)


@dataclass(frozen=True)
class LogitsRules:
    """A model's fixed logits rules, applied before sampling (after the penalties).

    These are HF generation-config rules vLLM has no sampling parameter for: Whisper's ``suppress_tokens``
    (never generated) and ``begin_suppress_tokens`` (not generated as the first token, e.g. a blank), applied to
    every request, then its ``timestamps`` rules, applied to the requests that ask for them (HF's order).
    """

    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    timestamps: TimestampRules | None = None

    @classmethod
    def from_generation_config(cls, gen_config: Any) -> LogitsRules:
        """From an HF ``GenerationConfig`` (or its dict form, as vLLM keeps it); missing lists mean none."""
        if gen_config is None:
            return cls()
        return cls(tuple(_config_get(gen_config, "suppress_tokens") or ()),
                   tuple(_config_get(gen_config, "begin_suppress_tokens") or ()),
                   TimestampRules.from_generation_config(gen_config))

    @property
    def is_empty(self) -> bool:
        """No rule changes any logit (timestamp rules change only rows that ask for them)."""
        return not (self.suppress_tokens or self.begin_suppress_tokens)

    def apply(self, logits: torch.Tensor, num_generated: Sequence[int]) -> None:
        """Set the suppressed logits of each row to -inf in place; ``num_generated[i]`` is row i's count."""
        if self.suppress_tokens:
            logits[:, list(self.suppress_tokens)] = -math.inf
        if self.begin_suppress_tokens:
            first = [i for i, n in enumerate(num_generated) if n == 0]
            if first:
                logits[torch.tensor(first)[:, None], torch.tensor(self.begin_suppress_tokens)] = -math.inf


def _config_get(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
