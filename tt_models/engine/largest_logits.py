"""A row's largest logits without a pass per question: the maxima of its blocks of ``BLOCK`` entries, read once,
tell its argmax (the first maximum of the first block holding the row's maximum) and its top-k (the k largest logits
lie in the k blocks with the largest maxima: outside them every entry is at most the smallest of those k maxima).
See ``tt_models.engine.sampler`` for what each pass costs."""

from __future__ import annotations

import numpy as np
import torch

from tt_models.engine.logits_rows import rows_divided

BLOCK = 128  # the width of the blocks top_k searches (it divides the vocabularies of Llama, Qwen2, Mistral, SmolLM2)


def block_maxima(logits: torch.Tensor, rows: list[int]) -> np.ndarray | None:
    """The maxima ``[B, V // BLOCK]`` of the blocks of ``BLOCK`` entries of host float32 ``logits [B, V]``, for the
    rows ``rows`` (the others' are left unset), or None (no rows, V not a multiple of ``BLOCK``, other logits). Of
    every row at once when most are asked for (reading the others costs less than a reduction per row, ~5 µs each),
    else of each row where it is."""
    batch, vocab = logits.shape
    if not rows or vocab % BLOCK or not _host_float32(logits):
        return None
    if 2 * len(set(rows)) >= batch:
        return logits.reshape(batch, vocab // BLOCK, BLOCK).amax(dim=-1).numpy()
    maxima = torch.empty(batch, vocab // BLOCK)
    for row in set(rows):
        torch.amax(logits[row].reshape(-1, BLOCK), dim=-1, out=maxima[row])
    return maxima.numpy()


def _host_float32(x: torch.Tensor) -> bool:
    return x.dtype == torch.float32 and x.device.type == "cpu"


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """The first maximum of each row, as ``torch.argmax``; float32 host logits go through numpy's SIMD argmax
    (13x torch's single-thread one over ``[32, 49152]``)."""
    if logits.dtype == torch.float32 and logits.device.type == "cpu":
        return torch.from_numpy(np.argmax(logits.numpy(), axis=-1))
    return logits.argmax(dim=-1)


def argmax_rows(logits: torch.Tensor, rows: list[int], maxima: np.ndarray | None = None) -> torch.Tensor:
    """:func:`argmax` of the rows ``rows`` of ``logits``: from their block maxima when the caller has them (the
    first block holding the row's maximum, then the first maximum in it: what numpy's argmax finds, NaN first), of
    all rows at once when they are every row in order, else of each row where it is (a row's argmax reads it once;
    copying the rows out first reads them twice, and an argmax over every row reads the rows not asked for)."""
    if maxima is not None:
        blocks = maxima[rows].argmax(axis=1)
        inside = logits.numpy().reshape(logits.shape[0], -1, BLOCK)[rows, blocks]
        return torch.from_numpy(blocks * BLOCK + inside.argmax(axis=1))
    if rows == list(range(logits.shape[0])):
        return argmax(logits)
    if logits.dtype == torch.float32 and logits.device.type == "cpu":
        values = logits.numpy()
        return torch.tensor([int(values[row].argmax()) for row in rows], dtype=torch.int64)
    return argmax(logits.index_select(0, torch.tensor(rows, dtype=torch.int64)))


def top_k(x: torch.Tensor, k: int, rows: list[int] | None = None, temperatures: list[float] | None = None,
          maxima: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(x[rows] / temperatures, k)`` of ``x [B, V]`` (``rows`` None: every row; ``temperatures`` None: no
    division): each row's k largest values, largest first, and their ids (which of several equal values comes back
    may differ). Found among the row's k blocks of ``BLOCK`` entries with the largest maxima (``maxima``:
    :func:`block_maxima` of ``x``, when the caller has them): a block left out has a maximum no larger than any
    chosen block's, so it holds nothing that beats the k chosen maxima. The rows are read where they are, divided
    only in the maxima and the chosen blocks (a division keeps the order of values: the divided maxima are the
    divided rows')."""
    batch, vocab = x.shape
    rows = list(range(batch)) if rows is None else rows
    if vocab % BLOCK or 4 * k * BLOCK > vocab or not _host_float32(x):
        return rows_divided(x, rows, temperatures).topk(k, dim=-1)
    chosen = (maxima if maxima is not None else block_maxima(x, rows))[rows]
    if temperatures is not None:
        np.divide(chosen, np.asarray(temperatures, dtype=np.float32)[:, None], out=chosen)
    found = _distinct_top_k(x.numpy(), chosen, rows, k, temperatures)
    if found is not None:
        return found
    return _top_k_in_blocks(x, torch.from_numpy(chosen), rows, k, temperatures)


def _distinct_top_k(values: np.ndarray, maxima: np.ndarray, rows: list[int], k: int,
                    temperatures: list[float] | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """:func:`top_k` in numpy when its answer is unique, else None: the row's entries at or above its k-th largest
    block maximum (all in the blocks whose maximum reaches it) hold its k largest values; sorted, they are what
    ``torch.topk`` returns when they are distinct (the k-th then beats every value left out, and no two ids compete
    for a place). Numpy calls on small arrays instead of torch's top-k of the maxima, copy of the blocks,
    top-k of them and ids, whose calls cost 10-200 µs each in the engine's step: ~300 µs less a step for the bench's
    mixed batch (top-51 and top-5, over 8 rows each)."""
    n, blocks = maxima.shape
    if k >= blocks or np.isnan(maxima).any():
        return None
    kth = np.partition(maxima, blocks - k, axis=1)[:, blocks - k]  # each row's k-th largest block maximum
    row_of, block = np.divmod(np.flatnonzero(maxima >= kth[:, None]), blocks)  # (flat: 5x np.nonzero)
    if len(block) > 4 * k * n:  # (many blocks tied at the k-th maximum: a flat row)
        return None
    flat_blocks = np.asarray(rows)[row_of] * blocks + block
    candidates = np.take(values.reshape(-1, BLOCK), flat_blocks, axis=0)  # (2x fancy indexing)
    if temperatures is not None:
        np.divide(candidates, np.asarray(temperatures, dtype=np.float32)[row_of, None], out=candidates)
    entry_row, entry = np.divmod(np.flatnonzero(candidates >= kth[row_of, None]), BLOCK)
    found, found_row = candidates[entry_row, entry], row_of[entry_row]
    order = np.lexsort((-found, found_row))  # by row, largest first
    ordered, ordered_row = found[order], found_row[order]
    if not ((ordered[1:] < ordered[:-1]) | (ordered_row[1:] != ordered_row[:-1])).all():  # a tie in some row
        return None
    counts = np.bincount(found_row, minlength=n)  # (every row has at least k: the k maxima themselves)
    top = order[(np.cumsum(counts) - counts)[:, None] + np.arange(k)]
    return torch.from_numpy(found[top]), torch.from_numpy(block[entry_row[top]] * BLOCK + entry[top])


def _top_k_in_blocks(x: torch.Tensor, maxima: torch.Tensor, rows: list[int], k: int,
                     temperatures: list[float] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`top_k` of host float32 ``x``'s rows ``rows``, whose block maxima (divided by ``temperatures``) are
    ``maxima``, in torch: one top-k over the maxima, one over the chosen blocks, whatever the ties."""
    vocab = x.shape[1]
    chosen = maxima.topk(k, dim=-1).indices  # [n, k]
    # The chosen blocks copied whole (``index_select`` over flat blocks: 10x ``gather`` with an expanded index).
    flat = (chosen + torch.tensor(rows)[:, None] * (vocab // BLOCK)).view(-1)
    candidates = x.reshape(-1, BLOCK).index_select(0, flat).view(len(rows), k * BLOCK)
    if temperatures is not None:
        candidates.div_(torch.tensor(temperatures, dtype=torch.float32)[:, None])
    values, at = candidates.topk(k, dim=-1)
    return values, chosen.gather(1, at // BLOCK) * BLOCK + at % BLOCK
