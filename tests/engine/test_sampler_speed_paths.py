"""The sampler's fast paths against the computations they stand for, bit for bit: argmax from block maxima against
numpy's argmax, the numpy top-k of distinct values against torch's top-k over the chosen blocks, top-k of rows divided
where they are read against the divided copy, the per-row log-normalizers against the batched ones, and whole steps
over logits read in place against the same logits in a contiguous copy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tt_models.engine.largest_logits import BLOCK, _distinct_top_k, _top_k_in_blocks, argmax_rows, block_maxima, top_k
from tt_models.engine.logits_rows import scaled_rows
from tt_models.engine.logprobs import exp_sums
from tt_models.engine.sampler import Sampler
from tt_models.engine.sampling import RowState, SamplingParams

VOCAB = 64 * BLOCK


def logits_with(seed: int, rows: int = 6, ties: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, VOCAB, generator=gen) * 3
    return logits.round() if ties else logits


@pytest.mark.parametrize("seed", range(4))
def test_argmax_from_block_maxima_is_numpys(seed):
    logits = logits_with(seed, ties=seed % 2 == 1)
    logits[1] = -math.inf  # every entry -inf: entry 0
    logits[2, 5 * BLOCK + 3] = logits[2, 40 * BLOCK + 1] = 1e9  # a tied maximum in two blocks: the first
    logits[3, 7] = logits[3, 9] = math.nan  # NaN wins, the first one
    logits[4] = 0.0
    logits[4, 3 * BLOCK] = -0.0  # zeros of both signs tie
    rows = [5, 0, 3, 2, 1, 4]
    maxima = block_maxima(logits, rows)
    expected = torch.from_numpy(np.argmax(logits.numpy(), axis=1))[rows]
    assert torch.equal(argmax_rows(logits, rows, maxima), expected)


def test_block_maxima_of_some_rows_equal_those_of_all():
    logits = logits_with(0, rows=8)
    whole = logits.view(8, -1, BLOCK).amax(dim=-1).numpy()
    some = block_maxima(logits, [6, 1])  # fewer than half the rows: one reduction per row
    assert np.array_equal(some[[6, 1]], whole[[6, 1]])
    assert np.array_equal(block_maxima(logits, [0, 1, 2, 3, 5]), whole)
    assert block_maxima(logits[:, :-1], [0]) is None  # not a whole number of blocks


@pytest.mark.parametrize("k", [1, 5, 51])
def test_distinct_top_k_is_torch_top_k_over_the_chosen_blocks(k):
    logits = logits_with(k, rows=5)
    rows = [4, 0, 2]
    maxima = block_maxima(logits, list(range(5)))[rows]
    found = _distinct_top_k(logits.numpy(), maxima.copy(), rows, k, None)
    assert found is not None  # distinct random values: the numpy path answers
    values, ids = _top_k_in_blocks(logits, torch.from_numpy(maxima), rows, k, None)
    assert torch.equal(found[0], values) and torch.equal(found[1], ids)
    assert torch.equal(found[0], logits[rows].topk(k, dim=-1).values)


def test_distinct_top_k_leaves_ties_to_torch():
    logits = logits_with(0, rows=3, ties=True)  # integers: the 5 largest of a row repeat some value
    maxima = block_maxima(logits, [0, 1, 2])
    assert _distinct_top_k(logits.numpy(), maxima, [0, 1, 2], 5, None) is None
    logits[:, 100] = math.nan
    assert _distinct_top_k(logits.numpy(), block_maxima(logits, [0, 1, 2]), [0, 1, 2], 5, None) is None


@pytest.mark.parametrize("ties", [False, True])
def test_top_k_divides_where_it_reads_as_the_divided_copy(ties):
    logits = logits_with(7, ties=ties)
    rows, temperatures = [3, 1, 4], [0.7, 1.0, 1.3]
    values, ids = top_k(logits, 20, rows, temperatures, block_maxima(logits, rows))
    copy_values, copy_ids = top_k(scaled_rows(logits, rows, temperatures), 20)
    assert torch.equal(values, copy_values)
    if not ties:  # (with ties, which of equal values comes back may differ)
        assert torch.equal(ids, copy_ids)


def test_log_normalizers_a_row_at_a_time_are_the_batched_ones():
    values = logits_with(3).numpy()
    rows = [5, 2, 2, 0]
    shifts, sums = exp_sums(values, rows)
    picked = values[rows]
    assert np.array_equal(shifts, picked.max(axis=1))
    assert np.array_equal(sums, np.exp(picked - shifts[:, None]).sum(axis=1))


PARAMS = [dict(temperature=0), dict(temperature=0.8, top_k=50, top_p=0.9, seed=1), dict(temperature=0, logprobs=5),
          dict(temperature=1.0, repetition_penalty=1.1, presence_penalty=0.5, seed=2),
          dict(temperature=0.7, top_p=0.8, seed=3), dict(temperature=1.2, min_p=0.1, top_k=30, seed=4, logprobs=2)]


def test_a_step_over_logits_in_place_equals_one_over_their_copy():
    batch = 12
    wide = torch.randn(batch, VOCAB + BLOCK, generator=torch.Generator().manual_seed(5)) * 2
    in_place = wide[:, :VOCAB]  # rows read where they are, not contiguous
    outputs = []
    for logits in (in_place, in_place.contiguous()):
        rows = [RowState(SamplingParams(**PARAMS[i % len(PARAMS)]), [1, 2, 3], [4]) for i in range(batch)]
        outputs.append(Sampler().sample(logits, rows))
    assert torch.equal(outputs[0].tokens, outputs[1].tokens)
    assert outputs[0].logprobs == outputs[1].logprobs
    assert sum(lp is not None for lp in outputs[0].logprobs) == 4
