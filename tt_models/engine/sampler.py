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
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from tt_models.engine.sampling import LogitsRules, RowState, SamplerOutput, SamplingParams, TokenLogprobs, take_rows
from tt_models.engine.structured_output import apply_guides

BLOCK = 128  # the width of the blocks top_k searches (it divides the vocabularies of Llama, Qwen2, Mistral, SmolLM2)
NUCLEUS_START = 64  # top-p's first candidate count, multiplied by 4 until the nucleus is inside


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
        _apply_allowed_token_ids(logits, rows)
        _apply_min_tokens(logits, rows)
        _apply_penalties(logits, rows)
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
        # where they are (see _random_sample for their temperature).
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
            gathered = _gather_logprobs(logits, [at[i] for i in want], tokens[want].tolist(), [rows[i] for i in want],
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
                drawn = _random_sample(_divide(_subset(logits, picked), temperatures), states)
            else:
                drawn = _random_sample(logits, states, picked, temperatures, maxima)
            tokens[[out[j] for j in random]] = drawn.numpy()


def _reads_maxima(params: SamplingParams, vocab: int) -> bool:
    """Whether an unprocessed row's token comes from its block maxima: greedy, or top-k without min_p."""
    return params.greedy or (0 < params.top_k < vocab and params.min_p == 0)


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


def _scaled_rows(logits: torch.Tensor, rows: list[int], temperatures: list[float]) -> torch.Tensor:
    """A copy of ``logits``' rows ``rows``, each divided by its temperature: one pass over each row for host float32
    (the copy and the division together; the same float32 division as ``div_``), else a copy divided in place."""
    if not (logits.dtype == torch.float32 and logits.device.type == "cpu"):
        return _divide(take_rows(logits, rows), temperatures)
    values = logits.numpy()
    scaled = np.empty((len(rows), values.shape[1]), dtype=np.float32)
    for j, (row, temperature) in enumerate(zip(rows, temperatures)):
        if temperature == 1.0:
            scaled[j] = values[row]
        else:
            np.divide(values[row], np.float32(temperature), out=scaled[j])
    return torch.from_numpy(scaled)


def _divide(logits: torch.Tensor, temperatures: list[float]) -> torch.Tensor:
    """``logits`` (the caller's copy) with each row divided in place by its temperature."""
    if any(t != 1.0 for t in temperatures):  # (a division by 1 changes nothing: a pass over the rows saved)
        logits.div_(torch.tensor(temperatures, dtype=torch.float32)[:, None])
    return logits


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
        return _rows_divided(x, rows, temperatures).topk(k, dim=-1)
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


def _rows_divided(x: torch.Tensor, rows: list[int], temperatures: list[float] | None) -> torch.Tensor:
    """``x``'s rows ``rows`` divided by ``temperatures``, in a copy (None: as they are, ``x`` itself when they are
    all of its rows)."""
    return _subset(x, rows) if temperatures is None else _scaled_rows(x, rows, temperatures)


def _apply_allowed_token_ids(logits: torch.Tensor, rows: Sequence[RowState]) -> None:
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


def _apply_min_tokens(logits: torch.Tensor, rows: Sequence[RowState]) -> None:
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


def _apply_penalties(logits: torch.Tensor, rows: Sequence[RowState]) -> None:
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


def _random_sample(logits: torch.Tensor, rows: Sequence[RowState], at: list[int] | None = None,
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
        logits, temperatures, maxima = _scaled_rows(logits, at, temperatures), None, None
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
        return _rows_divided(logits, [at[i] for i in group], None if temperatures is None else
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


def _subset(x: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """``x``'s rows ``rows``: ``x`` itself when they are all of them, in order."""
    return x if rows == list(range(x.shape[0])) else take_rows(x, rows)


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
            row = _rows_divided(logits, rows[j:j + 1], None if temperatures is None else temperatures[j:j + 1])[0]
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
    shift, mass = _exp_sums(logits.numpy(), list(range(len(ps))))
    shift = shift[:, None]
    ps_array = np.asarray(ps, dtype=np.float32)
    kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    pending, k = list(range(len(ps))), NUCLEUS_START
    while pending:
        k = min(k, vocab)
        # (of the logits themselves: shifting first may merge neighbours)
        values, ids = (t.numpy() for t in top_k(_subset(logits, pending), k))
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


def _exp_sums(values: np.ndarray, rows: list[int], shifts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
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


def _gather_logprobs(raw: torch.Tensor, at: list[int], tokens: list[int], rows: Sequence[RowState],
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
    shifts, mass = _exp_sums(values, at, top_values[:, 0])  # (each row's largest value is its maximum: a pass saved)
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
