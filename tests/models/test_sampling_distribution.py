"""Device sampling's distribution against an independent reference (host backend).

``tt/sampling.py`` turns TT vLLM's per-row ``TTSamplingParams`` into the device's ``ttnn.sampling`` inputs; a wrong
temperature (T for 1/T) or nucleus still gives plausible tokens, so the greedy and reproducibility checks of
``test_device_sampling.py`` cannot see it. Here one fixed logits vector is sampled many times through the real path
(``SamplingBatch.of`` -> ``TTSampling.forward``, replayed in a decode trace): 32 rows a step, each row seeded apart,
and the token counts are compared with softmax(logits / T) restricted to vLLM's nucleus, computed here with torch
(Pearson's chi-square, p > 0.001); tokens outside the nucleus (or top-k) must never appear. Log-probs are vLLM's
default ``logprobs_mode`` (``raw_logprobs``: ``log_softmax`` of the unprocessed logits, which the plugin passes
through as the model returns them), checked at T = 0.7.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from tt_models.runtime import close_device, open_device, ttnn, use
from tt_models.tt.decode_trace import DecodeTraces
from tt_models.tt.sampling import ROWS, SamplingBatch, TTSampling

VOCAB = 32  # ttnn.topk takes 32 candidates: the whole vocabulary, so top-k 32 is the full softmax
STEPS = 100  # 3200 draws a case
# 16 tokens from 3 down in steps of 1/8 (exact in bfloat16, as ttnn.sampling reads the candidates: at T = 0.3 the
# nucleus of p = 0.5 still holds 2 tokens) and 16 far below (never drawn in practice); shuffled, so that token ids
# are not ranks. T for 1/T moves these distributions by a chi-square noncentrality of 50 to 30000 (3200 draws).
_SPREAD = [3.0 - 0.125 * i for i in range(16)] + [-20.0] * 16
LOGITS = torch.tensor(_SPREAD)[torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))]


def reference(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """vLLM's sampler (float64; ``apply_top_k_top_p``): logits / T, top-k, then the smallest set of best tokens
    whose mass under the softmax of the top k reaches p, renormalised."""
    order = logits.argsort(descending=True, stable=True)
    rank = torch.arange(len(logits))
    sorted_probs = torch.softmax(torch.where(rank < top_k, logits[order].double() / temperature, -torch.inf), -1)
    before = sorted_probs.cumsum(0) - sorted_probs  # the mass of the better tokens
    keep = (rank < top_k) & ((before < top_p) | (rank == 0))
    out = torch.zeros(len(logits), dtype=torch.float64)
    out[order[keep]] = sorted_probs[keep]
    return out / out.sum()


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's goodness of fit over the tokens of non-zero probability; bins expecting < 5 draws merged into one
    (the test's validity condition). The p-value is the chi-square survival function, Q(df / 2, stat / 2)."""
    n = int(counts.sum())
    expected = probs * n
    live = probs > 0
    big = live & (expected >= 5)
    obs = [counts[big].double()]
    exp = [expected[big]]
    small = live & ~big
    if bool(small.any()):
        obs.append(counts[small].double().sum()[None])
        exp.append(expected[small].sum()[None])
    obs, exp = torch.cat(obs), torch.cat(exp)
    df = len(obs) - 1
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64))), df


@pytest.fixture(scope="module")
def sampler():
    """``draw(**params) -> (tokens [STEPS * 32], log_probs or None)``: STEPS traced steps on the fixed logits."""
    device = open_device("host")
    traces = DecodeTraces()
    with use(device):
        sampling = TTSampling(device)
        logits = ttnn.from_torch(LOGITS.expand(1, 1, ROWS, VOCAB).contiguous(), dtype=ttnn.float32,
                                 layout=ttnn.TILE_LAYOUT, device=device)

    def draw(temperature: float, top_k: int = VOCAB, top_p: float = 1.0, log_probs: bool = False,
             first_seed: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
        tokens, lps = [], []
        for step in range(STEPS):
            # TT vLLM's lists; each row and step its own seed (the sampler mixes it with the position)
            params = SimpleNamespace(temperature=[temperature] * ROWS, top_k=[top_k] * ROWS, top_p=[top_p] * ROWS,
                                     seed=[first_seed + step * ROWS + row for row in range(ROWS)],
                                     enable_log_probs=[log_probs] * ROWS)
            batch = SamplingBatch.of(params, list(range(ROWS)), [7] * ROWS, VOCAB, random.Random(0))
            with use(device):
                host = batch.host_inputs(device, VOCAB)
                out = traces.run(0, device, batch.mode, host,
                                 lambda inputs, mode=batch.mode: sampling.forward(logits, mode, inputs))
                tokens.append(ttnn.to_torch(out[0]).reshape(-1).long())
                if log_probs:
                    lps.append(ttnn.to_torch(out[1]).reshape(-1).double())
        return torch.cat(tokens), torch.cat(lps) if log_probs else None

    yield draw
    with use(device):
        traces.release()
    close_device(device)


# The top-k cases: top-p's mass is that of the k best alone (as ttnn.sampling's kernel and vLLM compute it): over
# all 32 candidates, the nucleus of (1.3, 6, 0.5) would hold all 6 tokens, not 3.
CASES = [(t, k, p) for t in (0.3, 0.7, 1.3) for k, p in ((VOCAB, 1.0), (VOCAB, 0.9), (VOCAB, 0.5))]
CASES += [(0.7, 5, 0.9), (1.3, 6, 0.5)]


@pytest.mark.parametrize("temperature, top_k, top_p", CASES)
def test_sampled_tokens_follow_softmax_over_temperature_in_the_nucleus(sampler, temperature, top_k, top_p):
    probs = reference(LOGITS, temperature, top_k, top_p)
    # The device reads p in bfloat16 (0.9 -> 0.898): no nucleus boundary of these cases lies in between.
    assert torch.equal(probs > 0, reference(LOGITS, temperature, top_k, float(torch.tensor(top_p).bfloat16())) > 0)
    tokens, _ = sampler(temperature, top_k, top_p)
    counts = torch.bincount(tokens, minlength=VOCAB)
    assert len(tokens) == STEPS * ROWS and len(counts) == VOCAB
    outside = (probs == 0) & (counts > 0)
    assert not bool(outside.any()), f"tokens outside the nucleus / top-k drawn: {outside.nonzero().flatten().tolist()}"
    p_value, df = chi_square_p_value(counts, probs)
    assert df >= 1, "the case must leave more than one token to draw"
    assert p_value > 1e-3, (f"T={temperature} k={top_k} p={top_p}: chi-square p-value {p_value:.2e} ({df} df); "
                            f"counts {counts.tolist()}, expected {(probs * len(tokens)).round().tolist()}")


def test_log_probs_are_raw_at_temperature_0_7(sampler):
    """vLLM's default ``logprobs_mode`` is ``raw_logprobs``: the sampled token's log-probability under the
    unprocessed logits, not under logits / T (which the test tells apart: they differ by far more than bfloat16)."""
    tokens, log_probs = sampler(0.7, log_probs=True, first_seed=50_000)
    raw = torch.log_softmax(LOGITS.double(), -1)[tokens]
    processed = torch.log_softmax(LOGITS.double() / 0.7, -1)[tokens]
    torch.testing.assert_close(log_probs, raw, atol=1e-3, rtol=1e-3)
    assert bool(((raw - processed).abs() > 0.05).any())
    # and the draws themselves still follow T = 0.7 with log-probs on (another trace: the log-prob mode)
    p_value, _ = chi_square_p_value(torch.bincount(tokens, minlength=VOCAB), reference(LOGITS, 0.7, VOCAB, 1.0))
    assert p_value > 1e-3
