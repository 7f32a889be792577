"""Raw logprobs (vLLM's default ``logprobs_mode="raw_logprobs"``: the log-softmax of the logits as the model returned
them) of the sampled token, its rank and the top ones, from one log-normalizer per row instead of a materialized
log-softmax."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tt_models.engine.largest_logits import top_k
from tt_models.engine.sampling import RowState


@dataclass(frozen=True)
class TokenLogprobs:
    """The sampled token's raw logprob and rank (1 = most likely; ties count against it, as in vLLM),
    and the ``logprobs`` most likely ``(token, logprob)`` pairs, most likely first (all of them for -1), or
    the pairs of the ``logprob_token_ids`` in their order."""

    token_id: int
    logprob: float
    rank: int
    top: list[tuple[int, float]]


def gather_logprobs(raw: torch.Tensor, at: list[int], tokens: list[int], rows: Sequence[RowState],
                    maxima: np.ndarray | None = None) -> list[TokenLogprobs]:
    """vLLM's ``gather_logprobs`` on raw logits ``raw [B, V]`` (row ``at[i]`` is state ``i``'s, read where it is;
    ``maxima``: its :func:`block_maxima`, when the caller has them): the log-softmax of the sampled token, its rank
    (1 + the logits above it; ties count against it, as in vLLM), and the top ``logprobs`` (one top-k at the rows'
    largest, each row cut to its own) or, for a row with ``logprob_token_ids``, exactly
    those ids in their order (``gather_specific_token_logprobs``). Each value is computed as torch's log_softmax
    computes it, ``(x - max) - log(sum(exp(x - max)))``, for the few entries reported (the sum in numpy's pairwise
    order: closer to the exact value than torch's, whose float32 sum over 49k entries drifts by ~1e-5)."""
    vocab = raw.shape[1]
    values = raw.numpy()
    wanted = [None if r.params.logprobs is None or r.logprob_ids is not None else
              (vocab if r.params.logprobs == -1 else min(r.params.logprobs, vocab)) for r in rows]
    width = min(max([2] + [w for w in wanted if w is not None]), vocab)  # >= 2: it tells most ranks
    top_values, top_ids = (t.numpy() for t in top_k(raw, width, at, maxima=maxima))
    shifts, mass = exp_sums(values, at, top_values[:, 0])  # (each row's largest value is its maximum: a pass saved)
    log_mass = np.log(mass).astype(np.float32)
    token_values = values[at, tokens]
    # The values of all rows at once, as Python lists (numpy per entry costs ~1 µs a call, the rows' loop ~100 µs).
    token_logprobs = ((token_values - shifts) - log_mass).tolist()
    top_logprobs, top_id_lists = ((top_values - shifts[:, None]) - log_mass[:, None]).tolist(), top_ids.tolist()
    ranks = (top_values >= token_values[:, None]).sum(axis=1).tolist()
    complete = (token_values > top_values[:, -1]).tolist()  # every logit >= the token's is among the top ones
    out = []
    for i, (w, r) in enumerate(zip(wanted, rows)):
        rank = ranks[i] if complete[i] or width == vocab else int(np.count_nonzero(values[at[i]] >= token_values[i]))
        if r.logprob_ids is not None:
            ids = r.params.logprob_token_ids
            top = list(zip(ids, ((values[at[i], ids] - shifts[i]) - log_mass[i]).tolist()))
        else:
            top = list(zip(top_id_lists[i][:w], top_logprobs[i][:w])) if w else []
        out.append(TokenLogprobs(tokens[i], token_logprobs[i], rank, top))
    return out


def exp_sums(values: np.ndarray, rows: list[int], shifts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The maximum of each row ``rows`` of ``values`` (``shifts`` when the caller has them) and the sum of its
    exponentials shifted by it (numpy's SIMD exp: 2x torch's on one core), a row at a time in one row's buffer: the
    rows are read where they are, not copied out first (8 rows of 49k: ~100 µs of the engine's step). The sum is
    numpy's pairwise one, the same for a row whatever the batch: torch splits a few rows' sums over its threads, so a
    request's logprobs would depend on how many others ran beside it."""
    if shifts is None:
        shifts = np.array([values[row].max() for row in rows], dtype=values.dtype)
    weights = np.empty(values.shape[1], dtype=values.dtype)
    sums = np.empty(len(rows), dtype=values.dtype)
    for j, row in enumerate(rows):
        sums[j] = np.exp(np.subtract(values[row], shifts[j], out=weights), out=weights).sum()
    return shifts, sums
