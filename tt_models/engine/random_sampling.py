"""A token drawn for a row sampled at random: min_p, top-k/top-p, then a draw from what is left, by inverting its
cumulative distribution at one uniform per row (vLLM's semantics at one random number per row). Top-k comes from the
row's block maxima, top-p alone from growing top-K candidates, a draw from the whole row blockwise; none sorts the
vocabulary."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from tt_models.engine.largest_logits import BLOCK, top_k
from tt_models.engine.logits_rows import rows_divided, scaled_rows, subset
from tt_models.engine.logprobs import exp_sums
from tt_models.engine.sampling import RowState

NUCLEUS_START = 64  # top-p's first candidate count, multiplied by 4 until the nucleus is inside


def random_sample(logits: torch.Tensor, rows: Sequence[RowState], at: list[int] | None = None,
                  temperatures: list[float] | None = None, maxima: np.ndarray | None = None) -> torch.Tensor:
    """min_p (vLLM's argmax-invariant processor), top-k/top-p, then a draw from what is left by inverting its
    cumulative distribution at one uniform per row: the distribution of vLLM's exponential race, at one random number
    per row instead of one per vocabulary entry. A seeded row draws from its own generator, so its tokens depend on
    its seed alone, not on the batch.

    Row ``at[i]`` of ``logits`` is ``rows[i]``'s (None: row i). Without ``temperatures``, the logits are already
    divided by them, in the caller's copy (changed in place). With them, the logits are the caller's, read where they
    are: the rows a step needs whole (min_p, top-p alone, a draw from the whole row) are divided into a copy, and
    top-k rows only in their block maxima (``maxima``: :func:`block_maxima`, when the caller has them) and chosen
    blocks (a copy of 8 rows of 49k, divided: ~150 µs of the engine's step)."""
    params = [r.params for r in rows]
    vocab_size = logits.shape[1]
    at = list(range(len(rows))) if at is None else at
    if temperatures is not None and any(x.min_p > 0 for x in params):  # min_p reads every row whole
        logits, temperatures, maxima = scaled_rows(logits, at, temperatures), None, None
        at = list(range(len(rows)))
    if any(x.min_p > 0 for x in params):
        probs = logits.softmax(dim=-1)
        threshold = probs.amax(dim=-1, keepdim=True) * torch.tensor([x.min_p for x in params])[:, None]
        logits.masked_fill_(probs < threshold, -math.inf)
    uniform = np.asarray(torch.rand(len(rows), dtype=torch.float64))  # the unseeded rows' draws
    for i, r in enumerate(rows):
        if r.generator is not None:
            uniform[i] = float(torch.rand(1, dtype=torch.float64, generator=r.generator))

    def whole(group: list[int]) -> torch.Tensor:
        """The rows of ``group``, divided, in a copy free to change (the caller's own rows when they are all)."""
        return rows_divided(logits, [at[i] for i in group], None if temperatures is None else
                             [temperatures[i] for i in group])

    tokens = np.empty(len(rows), dtype=np.int64)
    limited = [i for i, x in enumerate(params) if 0 < x.top_k < vocab_size]
    nucleus = [i for i, x in enumerate(params) if not 0 < x.top_k < vocab_size and x.top_p < 1]
    drawn_whole = [i for i, x in enumerate(params) if not 0 < x.top_k < vocab_size and x.top_p >= 1]
    if limited:
        values, ids = _top_k_kept(logits, [params[i].top_k for i in limited], [at[i] for i in limited],
                                  None if temperatures is None else [temperatures[i] for i in limited], maxima)
        tokens[limited] = _draw_candidates(values, ids, [params[i].top_p for i in limited], uniform[limited])
    if nucleus:
        values, ids = _nucleus(whole(nucleus), [params[i].top_p for i in nucleus])
        tokens[nucleus] = _draw_candidates(values, ids, [1.0] * len(nucleus), uniform[nucleus])
    if drawn_whole:
        tokens[drawn_whole] = _draw_rows(whole(drawn_whole).numpy(), uniform[drawn_whole])
    return torch.from_numpy(tokens)


def _top_k_kept(logits: torch.Tensor, ks: list[int], rows: list[int] | None = None,
                temperatures: list[float] | None = None,
                maxima: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's logits >= its k-th largest, largest first, with their ids, as ``[n, W]`` arrays padded with -inf:
    vLLM's top-k mask, which keeps every logit tied with the k-th. Of ``logits``' rows ``rows`` (None: all) divided
    by ``temperatures`` (None: as they are). One top-k at the largest k + 1 over the rows tells whether a row's k-th
    has a tie; a row that has one takes a top-k over its own vocabulary."""
    rows = list(range(logits.shape[0])) if rows is None else rows
    width = min(max(ks) + 1, logits.shape[1])
    found_values, found_ids = top_k(logits, width, rows, temperatures, maxima)
    values_np, ids_np = found_values.numpy(), found_ids.numpy()
    k_array = np.asarray(ks)
    at_k = values_np[np.arange(len(ks)), np.minimum(k_array, width - 1)]
    if ((k_array < width) & (at_k < values_np[np.arange(len(ks)), k_array - 1])).all():  # no ties: no row's loop
        kept_mask = np.arange(max(ks)) < k_array[:, None]
        return (np.where(kept_mask, values_np[:, :max(ks)], np.float32(-np.inf)),
                np.where(kept_mask, ids_np[:, :max(ks)], 0))
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    for j, k in enumerate(ks):
        if k < width and values_np[j, k] < values_np[j, k - 1]:
            kept.append((values_np[j, :k], ids_np[j, :k]))
        else:
            row = rows_divided(logits, rows[j:j + 1], None if temperatures is None else temperatures[j:j + 1])[0]
            count = int((row >= float(values_np[j, k - 1])).sum())
            tied_values, tied_ids = row.topk(count)
            kept.append((tied_values.numpy(), tied_ids.numpy()))
    return _pad(kept)


def _pad(rows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (values, ids) of different lengths as ``[n, W]`` arrays: values padded with -inf, ids with 0."""
    width = max(len(v) for v, _ in rows)
    values = np.full((len(rows), width), -np.inf, dtype=np.float32)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    for row, (v, i) in enumerate(rows):
        values[row, :len(v)], ids[row, :len(i)] = v, i
    return values, ids


def _top_p_mask(probs: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """vLLM's top-p over each row's probabilities ``[n, W]``, largest first: vLLM drops the low tail (ascending)
    whose cumulative probability is <= 1 - p, so an entry is kept when the probability above it is below p (the top
    one always). The sums are in float64: vLLM's float32 cumsum over the ~40k entries of a flat row's nucleus at
    p = 0.999 drifts enough to move the cut by ~15 entries."""
    above = np.cumsum(probs, axis=1, dtype=np.float64) - probs
    keep = above < ps[:, None]
    keep[:, 0] = True
    return keep


def _draw_candidates(values: np.ndarray, ids: np.ndarray, ps: list[float], uniform: np.ndarray) -> np.ndarray:
    """Each row's draw among its candidate logits ``values [n, W]`` (largest first, -inf padded), after top-p
    within them (vLLM applies top-p to what top-k left), by inverting the cumulative distribution at ``uniform``."""
    weights = np.exp(values - values[:, :1])
    weights /= weights.sum(axis=1, keepdims=True)
    ps_array = np.asarray(ps, dtype=np.float32)
    if (ps_array < 1).any():
        weights = np.where(_top_p_mask(weights, ps_array), weights, 0)
    return ids[np.arange(len(ids)), _invert(np.cumsum(weights, axis=1), uniform)]


def _nucleus(logits: torch.Tensor, ps: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's top-p set (vLLM's rule), largest first and -inf padded, with ids, without sorting its vocabulary:
    among its largest ``NUCLEUS_START`` logits, then 4x as many, until their probabilities reach p (at the whole
    vocabulary, every logit is kept)."""
    vocab = logits.shape[1]
    shift, mass = exp_sums(logits.numpy(), list(range(len(ps))))
    shift = shift[:, None]
    ps_array = np.asarray(ps, dtype=np.float32)
    kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    pending, k = list(range(len(ps))), NUCLEUS_START
    while pending:
        k = min(k, vocab)
        # (of the logits themselves: shifting first may merge neighbours)
        values, ids = (t.numpy() for t in top_k(subset(logits, pending), k))
        probs = np.exp(values - shift[pending]) / mass[pending, None]
        reached = probs.sum(axis=1, dtype=np.float64) >= ps_array[pending]
        keep = _top_p_mask(probs, ps_array[pending])
        for j, row in enumerate(pending):
            if reached[j] or k == vocab:  # (at the whole vocabulary rounding may keep the total under p: keep all)
                m = int(keep[j].sum())
                kept[row] = values[j, :m], ids[j, :m]
        pending = [row for row in pending if row not in kept]
        k *= 4
    return _pad([kept[row] for row in range(len(ps))])


def _invert(cdf: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Each row's draw at ``uniform`` in [0, 1) from its cumulative weights ``cdf [n, W]``: the first entry whose
    cumulative weight exceeds ``uniform`` times the total (entries of zero weight add no width, so they are never
    drawn; rounding past the total falls back to the last entry of nonzero weight)."""
    target = uniform * cdf[:, -1]
    at = (cdf <= target[:, None]).sum(axis=1)
    # The last entry of nonzero weight is the first at the total: the cumulative weights do not decrease, and every row
    # drawn from has some weight (a row of NaNs gets entry 0 either way).
    last = np.argmax(cdf >= cdf[:, -1:], axis=1)
    return np.minimum(at, last)


def _draw_rows(logits: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Each row's draw at its uniform from the softmax of its whole row (``logits`` is overwritten: the caller's
    copy), by inverting the cumulative distribution blockwise: the block whose running sum passes the target, then
    the entry within it (one exp and one sum over the row, a cumsum over one block)."""
    n, vocab = logits.shape
    weights = np.exp(np.subtract(logits, logits.max(axis=1, keepdims=True), out=logits), out=logits)
    starts = np.arange(0, vocab, BLOCK)
    running = np.cumsum(_block_sums(weights), axis=1)
    block = _invert(running, uniform)
    base = np.where(block > 0, running[np.arange(n), np.maximum(block - 1, 0)], 0.0)
    positions = starts[block][:, None] + np.arange(BLOCK)  # (the last block may be short)
    inside = np.where(positions < vocab, weights[np.arange(n)[:, None], np.minimum(positions, vocab - 1)], 0)
    cdf = np.cumsum(inside, axis=1)
    at = _invert(cdf, (uniform * running[:, -1] - base) / np.maximum(cdf[:, -1], np.finfo(np.float32).tiny))
    return starts[block] + at


def _block_sums(weights: np.ndarray) -> np.ndarray:
    """The sums of each row's blocks of ``BLOCK`` entries (the last one may be short): torch's reduction when the
    blocks are whole (3x numpy's ``reduceat``; each block is summed by one thread, so the result does not depend on
    the batch)."""
    n, vocab = weights.shape
    if vocab % BLOCK == 0:
        return torch.from_numpy(weights).view(n, vocab // BLOCK, BLOCK).sum(dim=-1).numpy()
    return np.add.reduceat(weights, np.arange(0, vocab, BLOCK), axis=1)
