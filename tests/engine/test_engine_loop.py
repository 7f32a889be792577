"""The engine loop against PagedHashModel: scheduling, chunked prefill, preemption (recompute and swap),
n > 1 with copy-on-write, aborts and bad input, with outputs checked token for token against solo runs.

The referee model reads every sequence back through its page tables, so equal outputs mean every slot, block
table, copy-on-write rebuild and swap was right; after every run every block must be free again.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams

from .paged_hash_model import VOCAB, PagedHashModel, checkpoint

BLOCK = 32


def make_engine(encoder_decoder: bool = False, **config) -> LLMEngine:
    config = EngineConfig(**{"max_num_seqs": 8, "block_size": BLOCK, "max_model_len": 256, **config})
    model = PagedHashModel(config.max_num_seqs, encoder_decoder, max_cross_attn_tokens=256)
    return LLMEngine(checkpoint(encoder_decoder), config, backend="host", generator=model)


def prompt(i: int, length: int, encoder_len: int = 0):
    tokens = [(7 * i + 3 * k) % VOCAB for k in range(length)]
    if not encoder_len:
        return {"prompt_token_ids": tokens}
    return {"encoder_prompt": {"prompt_token_ids": [(5 * i + k) % VOCAB for k in range(encoder_len)]},
            "decoder_prompt": {"prompt_token_ids": tokens}}


def params(max_tokens: int, n: int = 1, seed: int = 0) -> SamplingParams:
    if n == 1:
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return SamplingParams(temperature=1.0, seed=seed, n=n, max_tokens=max_tokens, ignore_eos=True)


def run(engine: LLMEngine, requests: list[tuple], arrivals: list[int] | None = None) -> dict[str, list[list[int]]]:
    """Submit ``(id, prompt, params)`` requests (request ``i`` at step ``arrivals[i]``) and step until done;
    returns each request's output token ids per sequence. Checks that every block is free at the end."""
    arrivals = arrivals or [0] * len(requests)
    pending = sorted(zip(arrivals, range(len(requests))))
    finished = {}
    step = 0
    while pending or engine.has_unfinished_requests():
        while pending and pending[0][0] <= step:
            request_id, p, sp = requests[pending.pop(0)[1]]
            engine.add_request(request_id, p, sp)
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = [c.token_ids for c in out.outputs]
        step += 1
    kv = engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks and kv.num_free_host_blocks == kv.num_host_blocks
    assert not engine.runner.batch.row_of
    return finished


def solo(encoder_decoder: bool, request: tuple) -> list[list[int]]:
    return run(make_engine(encoder_decoder), [request])[request[0]]


def workload(encoder_decoder: bool, lengths: list[tuple[int, int, int, int]]) -> list[tuple]:
    """``(prompt_len, encoder_len, max_tokens, n)`` -> requests."""
    return [(f"r{i}", prompt(i, p, e if encoder_decoder else 0), params(m, n, seed=i))
            for i, (p, e, m, n) in enumerate(lengths)]


MIXED = [(5, 20, 150, 1), (70, 3, 12, 1), (33, 64, 100, 2), (1, 100, 120, 1), (64, 9, 35, 3), (2, 33, 150, 1)]


@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder-only", "encoder-decoder"])
@pytest.mark.parametrize("config", [
    dict(),
    dict(max_num_batched_tokens=40),
    dict(enable_chunked_prefill=False),
    dict(num_kv_blocks=16, max_num_batched_tokens=50),
    dict(num_kv_blocks=16, preemption_mode="swap"),
    dict(num_kv_blocks=16, preemption_mode="recompute", max_num_seqs=6),
], ids=["roomy", "chunked-40", "unchunked", "small-pool", "small-pool-swap", "small-pool-recompute-6-slots"])
def test_mixed_workload_equals_solo_runs(encoder_decoder, config):
    requests = workload(encoder_decoder, MIXED)
    expected = {r[0]: solo(encoder_decoder, r) for r in requests}
    engine = make_engine(encoder_decoder, **config)
    assert run(engine, requests, arrivals=[0, 0, 3, 5, 5, 20]) == expected
    if "num_kv_blocks" in config:
        assert engine.scheduler.num_preemptions > 0, "the small pool should force preemption"
    budget = config.get("max_num_batched_tokens")
    if budget is not None:
        chunks = engine.runner.model.prefill_chunks
        assert all(sum(end - start for start, end in call) <= budget for call in chunks)
        assert any(0 < start and end - start > 1 for call in chunks for start, end in call), \
            "a prompt over the budget should continue in a later chunk"


def test_n_sequences_diverge_and_share_the_prompt():
    engine = make_engine()
    out = run(engine, [("r", prompt(0, 40), params(20, n=4, seed=3))])["r"]
    assert len(out) == 4 and len({tuple(o) for o in out}) > 1, "seeded children should sample differently"


def test_steps_are_all_prefill_or_all_decode():
    engine = make_engine(max_num_batched_tokens=48)
    run(engine, workload(False, MIXED), arrivals=[0, 1, 2, 3, 4, 5])
    assert set(engine.runner.model.calls) == {"prefill", "decode"}
    assert engine.stats["prefill_steps"] + engine.stats["decode_steps"] == len(engine.runner.model.calls)


def test_abort_frees_blocks_everywhere():
    """Aborted while waiting, running and swapped out: every block comes back."""
    engine = make_engine(num_kv_blocks=16, preemption_mode="swap", max_num_batched_tokens=32)
    requests = workload(False, [(40, 0, 200, 1), (40, 0, 200, 1), (90, 0, 150, 2), (10, 0, 200, 1), (10, 0, 200, 1),
                                (5, 0, 10, 1)])
    for r in requests[:5]:
        engine.add_request(*r)
    scheduler = engine.scheduler
    for _ in range(100):
        engine.step()
        if scheduler.swapped:
            break
    engine.add_request(*requests[5])  # waits: nothing is admitted while a request is swapped out
    engine.step()
    seen_swapped = bool(scheduler.swapped and scheduler.running and scheduler.waiting)
    for request_id in ["r4", "r5", "r2", "r0", "r1", "r3"]:
        out = engine.abort_request(request_id)
        assert out is not None and out.finished
        assert all(c.finish_reason in ("abort", "length") for c in out.outputs)
    kv = engine.scheduler.kv
    assert seen_swapped, "the test should catch requests waiting, running and swapped out at once"
    assert kv.num_free_blocks == kv.num_blocks and kv.num_free_host_blocks == kv.num_host_blocks
    assert not engine.has_unfinished_requests() and not engine.runner.batch.row_of
    assert engine.abort_request("r0") is None


@pytest.mark.parametrize("bad, message", [
    ({"prompt_token_ids": []}, "empty"),
    ({"prompt_token_ids": [1] * 256}, "maximum model length"),
    ({"prompt_token_ids": [1, VOCAB]}, "vocab"),
    ({"prompt_token_ids": [1, -1]}, "vocab"),
    ({"prompt": "text", "multi_modal_data": {"audio": ([0.0], 16000)}}, "multi-modal"),
])
def test_bad_request_fails_alone(bad, message):
    engine = make_engine()
    good = workload(False, [(10, 0, 8, 1), (20, 0, 8, 1)])
    engine.add_request(*good[0])
    engine.step()
    with pytest.raises(ValueError, match=message):
        engine.add_request("bad", bad, params(8))
    engine.add_request(*good[1])
    assert run(engine, []) .keys() == {"r0", "r1"}


def test_encoder_input_over_the_limit_fails_alone():
    engine = make_engine(encoder_decoder=True)
    engine.add_request("good", prompt(0, 5, encoder_len=20), params(6))
    with pytest.raises(ValueError, match="encoder prompt"):
        engine.add_request("bad", {"prompt_token_ids": [5] * 257}, params(6))  # BART: 256 positions
    assert run(engine, []).keys() == {"good"}


def test_unsupported_parameters_and_unfittable_requests_raise():
    engine = make_engine(num_kv_blocks=16)
    with pytest.raises(ValueError, match="n must be 1 when using greedy"):
        engine.add_request("a", prompt(0, 5), SamplingParams(temperature=0.0, n=2))
    with pytest.raises(ValueError, match="KV blocks"):
        engine.add_request("b", prompt(0, 5), SamplingParams(temperature=1.0, n=4, max_tokens=250))
    with pytest.raises(ValueError, match="language, task and previous_text"):
        engine.add_request("c", prompt(0, 5), params(4), language="en")
    engine.add_request("d", prompt(0, 5), params(4))
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("d", prompt(0, 5), params(4))
    assert run(engine, []).keys() == {"d"}


@settings(max_examples=60)
@given(
    encoder_decoder=st.booleans(),
    lengths=st.lists(st.tuples(st.integers(1, 90), st.integers(1, 70), st.integers(1, 40),
                               st.sampled_from([1, 1, 2, 3])),
                     min_size=1, max_size=7),
    arrivals=st.lists(st.integers(0, 30), min_size=7, max_size=7),
    num_kv_blocks=st.integers(16, 48),
    budget=st.integers(1, 128),
    chunked=st.booleans(),
    mode=st.sampled_from([None, "recompute", "swap"]),
    max_num_seqs=st.integers(3, 8),
)
def test_random_workloads_equal_solo_runs(encoder_decoder, lengths, arrivals, num_kv_blocks, budget, chunked, mode,
                                          max_num_seqs):
    requests = workload(encoder_decoder, lengths)
    config = dict(num_kv_blocks=num_kv_blocks, max_num_batched_tokens=budget if chunked else None,
                  enable_chunked_prefill=chunked, preemption_mode=mode, max_num_seqs=max_num_seqs)
    engine = make_engine(encoder_decoder, **config)
    fits = []
    for r in requests:  # requests that can never fit this pool are refused up front
        try:
            engine.add_request(*r)
            fits.append(r)
        except ValueError as e:
            assert "KV blocks" in str(e)
    for r in fits:
        engine.abort_request(r[0])
    assert run(engine, fits, arrivals[:len(fits)]) == {r[0]: solo(encoder_decoder, r) for r in fits}
