"""Device sampling (host backend): ``sampling_params`` make prefill and decode return tokens computed with ttnn's
argmax / top-k / sampling ops (and log-probs with softmax / gather / log), inside the decode trace.

Greedy tokens equal the host argmax of the same step's logits (mixed batches included); seeded top-k/top-p
draws repeat per seed whatever the batch and whether traced or not, and follow the engine's host sampler's
distribution; log-probs match the host's ``log_softmax``; penalties follow vLLM's rules. The distribution against
softmax(logits / T) with the nucleus, and log-probs at T != 1: ``test_sampling_distribution.py``.
"""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from tests.models.test_decode_trace import build
from tt_models.engine.sampler import Sampler
from tt_models.engine.sampling import RowState, SamplingParams

ROWS = 4  # MAX_BATCH of build()
DEVICE_DRAWS, HOST_DRAWS = 150, 4000  # per request (the device draws cost a traced decode step each)


def params(**fields):
    """TT vLLM's ``TTSamplingParams`` as lists over the padded rows (its defaults in padding rows)."""
    defaults = dict(temperature=0.0, top_k=1, top_p=0.0, presence_penalty=0.0, frequency_penalty=0.0,
                    repetition_penalty=1.0, seed=None, enable_log_probs=False)
    return SimpleNamespace(**{k: fields.get(k, [v] * ROWS) for k, v in defaults.items()})


@pytest.fixture(scope="module")
def prefilled(host_device_module):
    """A tiny Llama with three requests prefilled; the decode arguments of their next step and its eager logits
    (host sampling's input, computed once: every test samples that same step)."""
    model, kv, driver, requests = build("llama-gqa", host_device_module)
    for slot, r in zip((1, 3, 0), requests):
        driver.add(r, slot)
    logits = driver.prefill(requests)
    step = dict(tokens=torch.zeros(ROWS, 1, dtype=torch.int32), start_pos=torch.full((ROWS,), -1),
                page_table=torch.zeros(ROWS, driver.width, dtype=torch.int32), kv_cache=kv)
    for r, row in zip(requests, logits):
        r.tokens.append(int(row.argmax()))
        driver._grow(r, len(r.tokens))
        step["tokens"][r.slot, 0] = r.tokens[-1]
        step["start_pos"][r.slot] = len(r.tokens) - 1
        step["page_table"][r.slot] = torch.tensor(driver._page_row(r))
    return model, driver, requests, logits, step, model.decode_forward(**step)[:, 0]


@pytest.fixture(scope="module")
def host_device_module():
    from tt_models.runtime import close_device, open_device
    device = open_device("host")
    yield device
    close_device(device)


def test_prefill_greedy_tokens_are_the_host_argmax(prefilled):
    model, driver, requests, logits, _, _ = prefilled
    # The prompts' last positions again, as one-token prefills (start_pos > 0): the same logits as their prefill.
    width = max(r.prompt_len for r in requests)
    tokens = model.prefill_forward(
        tokens=torch.tensor([r.tokens[: r.prompt_len] + [0] * (width - r.prompt_len) for r in requests],
                            dtype=torch.int32),
        page_table=torch.tensor([driver._page_row(r) for r in requests], dtype=torch.int32),
        kv_cache=driver.kv_cache, prompt_lens=[r.prompt_len for r in requests],
        start_pos=[r.prompt_len - 1 for r in requests], empty_slots=[r.slot for r in requests],
        sampling_params=SimpleNamespace(temperature=[0.0] * 3, top_k=[1] * 3, top_p=[0.0] * 3))
    assert tokens.tolist() == logits.argmax(-1).tolist()


@pytest.mark.parametrize("trace", [False, True])
def test_decode_greedy_tokens_are_the_host_argmax(prefilled, trace):
    model, _, requests, _, step, logits = prefilled
    active = [r.slot for r in requests]
    greedy = model.decode_forward(**step, enable_trace=trace, sampling_params=params())
    assert greedy[active].tolist() == logits[active].argmax(-1).tolist()
    # A mixed batch runs ttnn.sampling: its greedy rows (k = 1, p = 0) still give the argmax.
    mixed = params(temperature=[0.9, 0.0, 0.0, 0.0], top_k=[20, 1, 1, 1], top_p=[0.9, 0.0, 0.0, 0.0])
    tokens = model.decode_forward(**step, enable_trace=trace, sampling_params=mixed)
    greedy_rows = [s for s in active if s != 0]
    assert tokens[greedy_rows].tolist() == logits[greedy_rows].argmax(-1).tolist()


def test_seeded_sampling_repeats_per_seed(prefilled):
    model, _, requests, _, step, logits = prefilled
    active = [r.slot for r in requests]

    def draw(seed, trace=False, top_k=32, top_p=1.0):
        sampling = params(temperature=[1.5] * ROWS, top_k=[top_k] * ROWS, top_p=[top_p] * ROWS, seed=[seed] * ROWS)
        return model.decode_forward(**step, enable_trace=trace, sampling_params=sampling)[active].tolist()

    first = draw(7)
    assert draw(7) == first and draw(7, trace=True) == first, "same seed, same tokens (eager or traced)"
    assert len({tuple(draw(seed)) for seed in range(3)} | {tuple(first)}) > 1, "other seeds draw other tokens"
    for seed in range(2):  # top-k: only the k best tokens can come out
        top3 = logits[active].topk(3, dim=-1).indices
        assert all(t in row.tolist() for t, row in zip(draw(seed, top_k=3), top3))
        top1 = logits[active].argmax(-1).tolist()  # top-p of almost 0 keeps the best token alone
        assert draw(seed, top_p=1e-6) == top1


def test_log_probs_match_host_log_softmax(prefilled):
    model, _, requests, _, step, logits = prefilled
    active = [r.slot for r in requests]
    sampling = params(temperature=[1.0] * ROWS, top_k=[32] * ROWS, top_p=[1.0] * ROWS, seed=[3] * ROWS,
                      enable_log_probs=[True] * ROWS)
    tokens, log_probs = model.decode_forward(**step, enable_trace=True, sampling_params=sampling)
    expected = torch.log_softmax(logits.double(), -1).gather(1, tokens.long()[:, None])[:, 0]
    torch.testing.assert_close(log_probs[active].double(), expected[active], atol=1e-3, rtol=1e-2)


def test_penalties_follow_vllm(prefilled):
    model, _, requests, _, step, logits = prefilled
    prompt = torch.full((ROWS, 48), -1, dtype=torch.int32)
    output = torch.full((ROWS, 4), -1, dtype=torch.int32)
    for r in requests:
        prompt[r.slot, : r.prompt_len] = torch.tensor(r.tokens[: r.prompt_len])
        output[r.slot, :3] = torch.tensor(logits[r.slot].topk(3).indices.tolist())  # penalise the likely tokens
    sampling = params(repetition_penalty=[1.3] * ROWS, frequency_penalty=[0.4] * ROWS, presence_penalty=[0.6] * ROWS)
    tokens = model.decode_forward(**step, enable_trace=True, sampling_params=sampling, prompt_tokens=prompt,
                                  output_tokens=output)
    for r in requests:  # vLLM's apply_penalties, then argmax
        row = logits[r.slot].clone()
        outs = output[r.slot][output[r.slot] >= 0].long()
        seen = torch.zeros_like(row, dtype=torch.bool)
        seen[prompt[r.slot][prompt[r.slot] >= 0].long()] = True
        seen[outs] = True
        row = torch.where(seen, torch.where(row > 0, row / 1.3, row * 1.3), row)
        counts = torch.bincount(outs, minlength=row.numel()).float()
        row = row - 0.4 * counts - 0.6 * (counts > 0).float()
        assert int(tokens[r.slot]) == int(row.argmax()), r.slot


def test_sampled_tokens_follow_the_host_samplers_distribution(prefilled):
    """A seeded T = 0.7, top-k 20, top-p 0.9 step of the tiny Llama, sampled on the device (traced) over many seeds,
    against the engine's host sampler (vLLM's semantics, another implementation) on the same logits: a two-sample
    chi-square per request (p > 0.001). It found the host ttnn.sampling's nucleus taken over all 32 candidates
    instead of the top k; the tiny model's logits are too flat for 150 draws to see the temperature, which
    test_sampling_distribution.py checks. (The engine itself only sends greedy steps to the device.)"""
    model, _, requests, _, step, logits = prefilled
    active = [r.slot for r in requests]
    sampling = dict(temperature=[0.7] * ROWS, top_k=[20] * ROWS, top_p=[0.9] * ROWS)
    device = torch.stack([model.decode_forward(**step, enable_trace=True,
                                               sampling_params=params(**sampling, seed=[seed] * ROWS))[active]
                          for seed in range(DEVICE_DRAWS)], dim=1).long()  # [request, draw]
    host_params = SamplingParams(temperature=0.7, top_k=20, top_p=0.9)
    for row, drawn in zip(logits[active], device):
        states = [RowState(replace(host_params, seed=seed), []) for seed in range(HOST_DRAWS)]
        host = Sampler().sample(row.expand(HOST_DRAWS, -1), states).tokens
        p_value, df = two_sample_chi_square(torch.bincount(drawn, minlength=row.numel()),
                                            torch.bincount(host, minlength=row.numel()))
        assert df >= 2 and p_value > 1e-3, (p_value, df)


def two_sample_chi_square(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int]:
    """Whether two count vectors come from one distribution: tokens the smaller sample would see fewer than 5 times
    (by the larger one's frequencies) pooled; the p-value is the chi-square survival function Q(df / 2, stat / 2)."""
    a, b = a.double(), b.double()
    rare = b / b.sum() * a.sum() < 5
    a = torch.cat([a[~rare], a[rare].sum()[None]])
    b = torch.cat([b[~rare], b[rare].sum()[None]])
    seen = a + b > 0
    a, b = a[seen], b[seen]
    ka, kb = (b.sum() / a.sum()).sqrt(), (a.sum() / b.sum()).sqrt()
    stat = float(((ka * a - kb * b) ** 2 / (a + b)).sum())
    df = len(a) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64))), df
