"""The host sampler: vLLM v1's sampler over a step's float32 logits ``[B, V]``, in few passes over the vocabulary.

On one core a pass over 8 rows of a 49k vocabulary costs 20-300 µs (a max: 20, an exp: 130, a ``torch.topk``: 300;
a sort: 25 ms), so each row is touched only as often as vLLM's semantics need:

- block maxima (:func:`block_maxima`): one torch ``amax`` over the blocks of 128 entries of the rows read as the
  model returned them (greedy, top-k, logprobs), the only full pass over those rows besides logprobs' exp;
- greedy rows: the first maximum of the first block holding the row's maximum (numpy's argmax, from the maxima), or
  one argmax (numpy's SIMD one) where there are none;
- raw logprobs: the row's log-normalizer (max, exp, sum; a row at a time where it is, no copy) and its top-n logits,
  not a materialized log-softmax (a rank counts the raw logits at or above the token's: vLLM counts log-softmax
  values, which rounding may tie);
- top-k (:func:`top_k`): the k largest logits of a row lie in the k blocks of 128 entries with the largest maxima
  (outside them every entry is at most the smallest of those k maxima), so a max per block and a top-k over k
  blocks replace a top-k over the vocabulary; when the entries at or above the k-th largest maximum are distinct,
  they, sorted in numpy, are the only answer ``torch.topk`` can give, found without its calls;
- temperature divides a row sampled at random where it is read: a top-k row only in its maxima and chosen blocks,
  rows needed whole (min_p, top-p alone, a draw from the whole row) in a copy;
- top-p without top-k: the nucleus is the first m logits whose mass reaches p, found among growing top-K candidates
  instead of by sorting the vocabulary;
- a draw from a whole row inverts its cumulative distribution blockwise (block sums, then one block's cumsum);
- penalties touch only the ids each row has seen, for all rows in one gather and one scatter.

Order and semantics are vLLM 0.25.1's (``vllm/v1/sample/sampler.py`` and ``ops/``): the grammar's mask,
allowed_token_ids, min_tokens, penalties, the model's rules, then greedy argmax or temperature -> min_p -> top-k ->
top-p -> a draw. Logprobs are vLLM's default ``logprobs_mode="raw_logprobs"``: the log-softmax of the logits as the
model returned them.

This module holds the batch's bookkeeping: which rows are read where the model left them and which in a copy that
some step changes, which share one pass of block maxima, and where each row's token and logprobs go. The passes are
modules of their own: ``logits_processors`` (allowed_token_ids, min_tokens, penalties, the model's rules),
``largest_logits`` (block maxima, argmax, top-k), ``random_sampling`` (min_p, top-k/top-p, the draw), ``logprobs``,
and ``logits_rows`` (rows copied out, divided by their temperatures).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tt_models.engine.largest_logits import argmax, argmax_rows, block_maxima
from tt_models.engine.logits_processors import LogitsRules, apply_allowed_token_ids, apply_min_tokens, apply_penalties
from tt_models.engine.logits_rows import divide, subset, take_rows
from tt_models.engine.logprobs import TokenLogprobs, gather_logprobs
from tt_models.engine.random_sampling import random_sample
from tt_models.engine.sampling import RowState, SamplingParams
from tt_models.engine.structured_output import apply_guides


class Sampler:
    """Picks each row's next token from host logits, as vLLM v1's sampler does (see the module's docstring)."""

    def __init__(self, rules: LogitsRules | None = None) -> None:
        self.rules = rules or LogitsRules()

    def process(self, logits: torch.Tensor, rows: Sequence[RowState]) -> torch.Tensor:
        """The steps that can change the greedy choice, on a float32 copy: the grammar, allowed_token_ids,
        min_tokens, penalties, rules."""
        return self._process(logits.to(torch.float32, copy=True, memory_format=torch.contiguous_format), rows)

    def _process(self, logits: torch.Tensor, rows: Sequence[RowState]) -> torch.Tensor:
        apply_guides(logits, [r.guide for r in rows])  # first, as vLLM's runner masks the logits it samples
        apply_allowed_token_ids(logits, rows)
        apply_min_tokens(logits, rows)
        apply_penalties(logits, rows)
        self.rules.apply(logits, [len(r.output_token_ids) for r in rows])
        if self.rules.timestamps is not None:
            self.rules.timestamps.apply(logits, rows)
        return logits

    def sample(self, logits: torch.Tensor, rows: Sequence[RowState],
               index: Sequence[int] | None = None) -> SamplerOutput:
        """Pick one token per state in ``rows``: from row ``index[i]`` of ``logits [B, V]`` for state ``i`` (None:
        row ``i``, ``B == len(rows)``); the input tensor is left unchanged. Logits of another dtype are sampled in
        float32 (as vLLM computes its logprobs)."""
        assert logits.dim() == 2 and (logits.shape[0] == len(rows) if index is None else len(index) == len(rows))
        logits = logits.float()
        if self.rules.is_empty and all(r.plain_greedy for r in rows):  # one pass over the logits, no copy
            tokens = argmax(logits)
            return SamplerOutput(tokens if index is None else tokens[index], [None] * len(rows))
        at = list(range(len(rows))) if index is None else list(index)
        tokens = np.empty(len(rows), dtype=np.int64)  # (numpy: torch's assignment to a list of rows costs 3x)
        # Rows whose logits some step changes get them in a copy (``changed[j]``'s in row j); the others are read
        # where they are (see random_sample for their temperature).
        changes = [r.processed or not self.rules.is_empty for r in rows]
        changed = [i for i, c in enumerate(changes) if c]
        untouched = [i for i, c in enumerate(changes) if not c]
        want = [i for i, r in enumerate(rows) if r.params.num_logprobs is not None]
        # One pass over the rows read as the model returned them, for their argmax, top-k and logprobs' top-n.
        maxima = block_maxima(logits, [at[i] for i in untouched if _reads_maxima(rows[i].params, logits.shape[1])]
                              + [at[i] for i in want])
        if untouched:
            self._pick(logits, [at[i] for i in untouched], [rows[i] for i in untouched], tokens, untouched,
                       owned=False, maxima=maxima)
        if changed:
            processed = self._process(take_rows(logits, [at[i] for i in changed]), [rows[i] for i in changed])
            self._pick(processed, list(range(len(changed))), [rows[i] for i in changed], tokens, changed, owned=True)
        logprobs: list[TokenLogprobs | None] = [None] * len(rows)
        if want:  # raw: from the logits as the model returned them
            gathered = gather_logprobs(logits, [at[i] for i in want], tokens[want].tolist(), [rows[i] for i in want],
                                       maxima)
            for i, lp in zip(want, gathered):
                logprobs[i] = lp
        return SamplerOutput(torch.from_numpy(tokens), logprobs)

    @staticmethod
    def _pick(logits: torch.Tensor, at: list[int], rows: list[RowState], tokens: np.ndarray, out: list[int],
              owned: bool, maxima: np.ndarray | None = None) -> None:
        """Tokens for ``rows`` (row ``at[j]`` of ``logits`` is ``rows[j]``'s) into ``tokens[out[j]]``; ``owned``:
        ``logits`` is this step's copy, free to be changed; ``maxima``: :func:`block_maxima` of ``logits``."""
        greedy = [j for j, r in enumerate(rows) if r.params.greedy]
        if greedy:
            tokens[[out[j] for j in greedy]] = argmax_rows(logits, [at[j] for j in greedy], maxima).numpy()
        random = [j for j, r in enumerate(rows) if not r.params.greedy]
        if random:
            picked, states = [at[j] for j in random], [rows[j] for j in random]
            temperatures = [r.params.temperature for r in states]
            if owned:
                drawn = random_sample(divide(subset(logits, picked), temperatures), states)
            else:
                drawn = random_sample(logits, states, picked, temperatures, maxima)
            tokens[[out[j] for j in random]] = drawn.numpy()


def _reads_maxima(params: SamplingParams, vocab: int) -> bool:
    """Whether an unprocessed row's token comes from its block maxima: greedy, or top-k without min_p."""
    return params.greedy or (0 < params.top_k < vocab and params.min_p == 0)


@dataclass(frozen=True)
class SamplerOutput:
    tokens: torch.Tensor  # [B] int64
    logprobs: list[TokenLogprobs | None]  # None for rows that asked for none
