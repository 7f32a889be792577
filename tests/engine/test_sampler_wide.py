"""The sampler's shortcuts over wide vocabularies against the plain computations they replace: block top-k against
``torch.topk``, the top-p nucleus found among growing candidates against vLLM's sort, the blockwise draw against
inverting the full cumulative distribution, raw logprobs and ranks against ``log_softmax``, vectorized penalties
against the per-row formulas. Logits come with ties (rounded values), flat and peaked rows, and vocabularies with and
without a whole number of blocks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models.engine.largest_logits import BLOCK, argmax_rows, top_k
from tt_models.engine.logits_rows import scaled_rows
from tt_models.engine.random_sampling import _draw_rows, _nucleus, _top_k_kept
from tt_models.engine.sampler import Sampler
from tt_models.engine.sampling import RowState, SamplingParams


def wide_logits(seed: int, rows: int, vocab: int, spread: float, ties: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * spread
    if ties:
        logits = logits.round()  # many equal values, at the k-th largest too
    peaks = torch.randint(0, vocab, (rows, 3), generator=gen)
    logits.scatter_add_(1, peaks, torch.full((rows, 3), 6.0))
    return logits


def reference_nucleus(row: torch.Tensor, p: float) -> set[int]:
    """vLLM's top-p (``apply_top_k_top_p_pytorch``): ascending sort, drop the tail whose cumulative probability is
    <= 1 - p, never the top one; in float64 (vLLM's float32 cumsum drifts over a flat row)."""
    sorted_values, ids = row.double().sort(descending=False)
    cumulative = sorted_values.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - p
    drop[-1] = False
    return set(ids[~drop].tolist())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), k=st.integers(1, 64), ties=st.booleans(),
       vocab=st.sampled_from([BLOCK * 192, BLOCK * 192 + 57]))
def test_top_k_equals_torch_topk(seed, k, ties, vocab):
    logits = wide_logits(seed, 4, vocab, 3.0, ties)
    values, ids = top_k(logits, k)
    expected = logits.topk(k, dim=-1).values
    assert torch.equal(values, expected)
    assert torch.equal(logits.gather(1, ids), values)  # the ids point at those values
    assert all(len(set(r)) == k for r in ids.tolist())


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), ks=st.lists(st.integers(1, 80), min_size=1, max_size=4))
def test_top_k_keeps_every_logit_tied_with_the_kth(seed, ks):
    logits = wide_logits(seed, len(ks), BLOCK * 64, 2.0, ties=True)
    values, ids = _top_k_kept(logits, ks)  # rows padded with -inf
    for row, k in enumerate(ks):
        kept = np.isfinite(values[row])
        row_values, row_ids = values[row, kept], ids[row, kept]
        kth = logits[row].topk(k).values[-1]
        assert sorted(row_ids.tolist()) == torch.nonzero(logits[row] >= kth)[:, 0].tolist()
        assert np.array_equal(row_values, logits[row, row_ids].numpy()) and (row_values[:-1] >= row_values[1:]).all()


@pytest.mark.parametrize("spread", [0.3, 2.0, 8.0])  # flat (thousands in the nucleus) to peaked (a handful)
@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.999])
def test_nucleus_equals_vllm_sorted_top_p(spread, p):
    logits = wide_logits(7, 6, BLOCK * 384, spread)
    padded_values, padded_ids = _nucleus(logits, [p] * 6)
    for row in range(6):
        kept = np.isfinite(padded_values[row])
        values, ids = torch.from_numpy(padded_values[row, kept]), torch.from_numpy(padded_ids[row, kept])
        expected = reference_nucleus(logits[row], p)
        # The largest logits (which of equal ones at the cut is the sort's choice), as many as vLLM keeps: float
        # sums in another order may move the cut by one token whose cumulative probability ties p.
        assert abs(len(ids) - len(expected)) <= 1, (len(ids), len(expected))
        assert len(set(ids.tolist())) == len(ids)
        assert float(logits[row, ids].min()) >= float(logits[row].topk(len(ids)).values[-1])
        assert torch.equal(values, logits[row, ids])


@pytest.mark.parametrize("vocab", [BLOCK * 384, 50265])  # SmolLM2's; BART's (a partial last block)
def test_blockwise_draw_inverts_the_full_cumulative_distribution(vocab):
    logits = wide_logits(3, 4, vocab, 2.0)
    logits[1, : vocab // 2] = -math.inf  # half the row can never be drawn
    uniforms = np.linspace(0.0, 1.0, 257, endpoint=False)[1:].tolist()
    for row in range(4):
        cdf = logits[row].double().softmax(dim=-1).cumsum(dim=-1).numpy()
        drawn = [int(_draw_rows(logits[row:row + 1].numpy().copy(), np.array([u]))[0]) for u in uniforms]
        for u, token in zip(uniforms, drawn):
            assert math.isfinite(float(logits[row, token]))
            below = cdf[token - 1] if token else 0.0
            assert below - 1e-5 <= u <= cdf[token] + 1e-5, (u, token, below, cdf[token])


def test_wide_logprobs_and_ranks_equal_log_softmax():
    vocab = BLOCK * 384
    logits = wide_logits(5, 6, vocab, 3.0, ties=True)
    params = [dict(temperature=0.0, logprobs=5), dict(temperature=0.9, logprobs=3, seed=1),
              dict(temperature=1.2, logprobs=0, seed=2), dict(temperature=0.0, logprob_token_ids=[7, 3, 99]),
              dict(temperature=1.0, top_k=40, logprobs=2, seed=3), dict(temperature=0.0)]
    rows = [RowState(SamplingParams(**p), [1, 2]) for p in params]
    out = Sampler().sample(logits, rows)
    # The exact log-softmax (float64): the sampler's float32 values are within 1e-6 of it at this width, where
    # torch's float32 log_softmax (vLLM's) is up to 1.2e-5 off (its sum of 49k exponentials rounds more).
    raw = logits.double().log_softmax(dim=-1)
    assert out.logprobs[5] is None
    for i in range(5):
        lp, token = out.logprobs[i], int(out.tokens[i])
        assert lp.token_id == token
        assert lp.logprob == pytest.approx(float(raw[i, token]), abs=2e-6)
        assert lp.rank == int((raw[i] >= raw[i, token]).sum())
        if i == 3:
            assert [t for t, _ in lp.top] == [7, 3, 99]
            assert [v for _, v in lp.top] == pytest.approx(raw[i, [7, 3, 99]].tolist(), abs=2e-6)
        else:
            n = params[i]["logprobs"]
            assert [v for _, v in lp.top] == pytest.approx(raw[i].topk(n).values.tolist(), abs=2e-6)
            assert [float(raw[i, t]) for t, _ in lp.top] == pytest.approx([v for _, v in lp.top], abs=2e-6)


def test_vectorized_penalties_equal_the_per_row_formulas():
    vocab = BLOCK * 64
    logits = wide_logits(11, 4, vocab, 3.0)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (50,), generator=gen).tolist() for _ in range(4)]
    outputs = [torch.randint(0, 300, (120,), generator=gen).tolist() for _ in range(4)]
    params = [dict(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=-0.2),
              dict(repetition_penalty=0.8), dict(frequency_penalty=-1.0), dict()]
    rows = [RowState(SamplingParams(**p), prompt, list(out[:60])) for p, prompt, out in zip(params, prompts, outputs)]
    sampler = Sampler()
    sampler.process(logits, rows)  # counts the first 60 outputs; the rest arrive one step later
    for r, out in zip(rows, outputs):
        r.output_token_ids.extend(out[60:])
    got = sampler.process(logits, rows)
    for i, (p, prompt, out) in enumerate(zip(params, prompts, outputs)):
        expected = logits[i].clone()
        ids, counts = torch.unique(torch.tensor(out), return_counts=True)
        penalty = torch.tensor(p.get("repetition_penalty", 1.0))
        seen = torch.unique(torch.tensor(prompt + out))
        expected[seen] = expected[seen] * torch.where(expected[seen] > 0, 1.0 / penalty, penalty)
        expected[ids] = expected[ids] - torch.tensor(p.get("frequency_penalty", 0.0)) * counts \
            - torch.tensor(p.get("presence_penalty", 0.0))
        assert torch.equal(got[i], expected)


def test_wide_mixed_batch_draws_from_each_rows_filtered_set():
    """A batch as the server sees it: every kind of row over a 49k vocabulary; each sampled token lies in the set
    its filters leave, and seeded rows repeat their tokens."""
    vocab = BLOCK * 384
    logits = wide_logits(9, 6, vocab, 2.0)
    params = [dict(temperature=0.0), dict(temperature=0.8, top_k=50, top_p=0.9, seed=4),
              dict(temperature=0.7, top_p=0.8, seed=5), dict(temperature=1.0, seed=6),
              dict(temperature=1.0, top_k=5), dict(temperature=0.5, min_p=0.1, seed=7)]

    def run() -> list[int]:
        return Sampler().sample(logits, [RowState(SamplingParams(**p), [0]) for p in params]).tokens.tolist()

    tokens, again = run(), run()
    assert [again[i] for i in (0, 1, 2, 3, 5)] == [tokens[i] for i in (0, 1, 2, 3, 5)]  # greedy and seeded rows
    assert tokens[0] == int(logits[0].argmax())
    scaled = logits[1] / 0.8
    top50 = scaled.masked_fill(scaled < scaled.topk(50).values[-1], -math.inf)
    assert tokens[1] in reference_nucleus(top50, 0.9)
    assert tokens[2] in reference_nucleus(logits[2] / 0.7, 0.8)
    assert tokens[4] in set(logits[4].topk(5).indices.tolist())
    probs = (logits[5] / 0.5).softmax(dim=-1)
    assert float(probs[tokens[5]]) >= 0.1 * float(probs.max())


def test_a_rows_logprobs_and_draws_do_not_depend_on_its_batch():
    """A request's logprobs and seeded tokens are the same alone and beside others, with torch on several threads
    (which split a few rows' reductions among them: the sampler must not use such reductions)."""
    vocab = BLOCK * 384
    logits = wide_logits(13, 8, vocab, 2.0)
    params = [dict(temperature=0.0, logprobs=3), dict(temperature=1.0, seed=3, logprobs=2),
              dict(temperature=0.8, top_p=0.9, seed=4, logprobs=1)]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        alone = [Sampler().sample(logits[i:i + 1], [RowState(SamplingParams(**p), [0])])
                 for i, p in enumerate(params)]
        batch = Sampler().sample(logits, [RowState(SamplingParams(**params[i % 3]), [0]) for i in range(8)])
    finally:
        torch.set_num_threads(threads)
    for i in range(3):
        assert int(batch.tokens[i]) == int(alone[i].tokens[0])
        assert batch.logprobs[i] == alone[i].logprobs[0]


def test_rows_picked_where_they_are_equal_the_copied_ones():
    """The sampler reads a subset of rows in place: each row's first maximum (ties included), and each row divided by
    its temperature bit for bit as a copy divided in place."""
    logits = wide_logits(17, 5, BLOCK * 48 + 9, 3.0, ties=True)
    assert torch.equal(argmax_rows(logits, [3, 0, 3]), logits.argmax(dim=-1)[[3, 0, 3]])
    temperatures = [0.7, 1.0, 1.3]
    expected = logits[[4, 1, 3]].div_(torch.tensor(temperatures)[:, None])
    assert torch.equal(scaled_rows(logits, [4, 1, 3], temperatures), expected)
