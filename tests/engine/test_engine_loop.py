"""The engine loop against PagedHashModel: scheduling, chunked prefill, preemption (recompute and swap),
n > 1 with copy-on-write, aborts and bad input, with outputs checked token for token against solo runs.

The referee model reads every sequence back through its page tables, so equal outputs mean every slot, block
table, copy-on-write rebuild and swap was right; after every run every block must be free again.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models import LLM
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams

from .paged_hash_model import VOCAB, FeedbackHashModel, PagedHashModel, checkpoint

BLOCK = 32


def make_engine(encoder_decoder: bool = False, **config) -> LLMEngine:
    config = EngineConfig(**{"max_num_seqs": 8, "block_size": BLOCK, "max_model_len": 256, **config})
    cls = FeedbackHashModel if config.sample_on_device else PagedHashModel
    model = cls(config.max_num_seqs, encoder_decoder, max_cross_attn_tokens=256)
    return LLMEngine(checkpoint(encoder_decoder), config, backend="host", generator=model)


def prompt(i: int, length: int, encoder_len: int = 0):
    tokens = [(7 * i + 3 * k) % VOCAB for k in range(length)]
    if not encoder_len:
        return {"prompt_token_ids": tokens}
    return {"encoder_prompt": {"prompt_token_ids": [(5 * i + k) % VOCAB for k in range(encoder_len)]},
            "decoder_prompt": {"prompt_token_ids": tokens}}


def params(max_tokens: int, n: int = 1, seed: int = 0, stop: list[int] | None = None) -> SamplingParams:
    stop = dict(stop_token_ids=stop) if stop else {}
    if n == 1:
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **stop)
    return SamplingParams(temperature=1.0, seed=seed, n=n, max_tokens=max_tokens, ignore_eos=True, **stop)


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


def fitting(engine: LLMEngine, requests: list[tuple]) -> list[tuple]:
    """The requests the engine's pool can ever hold: the others are refused up front, naming the KV blocks."""
    fits = []
    for r in requests:
        try:
            engine.add_request(*r)
            fits.append(r)
        except ValueError as e:
            assert "KV blocks" in str(e)
    for r in fits:
        engine.abort_request(r[0])
    return fits


def solo(encoder_decoder: bool, request: tuple) -> list[list[int]]:
    return run(make_engine(encoder_decoder), [request])[request[0]]


def workload(encoder_decoder: bool, lengths: list[tuple[int, int, int, int]],
             stop: list[int] | None = None) -> list[tuple]:
    """``(prompt_len, encoder_len, max_tokens, n)`` -> requests (``stop``: stop token ids of every request)."""
    return [(f"r{i}", prompt(i, p, e if encoder_decoder else 0), params(m, n, seed=i, stop=stop))
            for i, (p, e, m, n) in enumerate(lengths)]


MIXED = [(5, 20, 150, 1), (70, 3, 12, 1), (33, 64, 100, 2), (1, 100, 120, 1), (64, 9, 35, 3), (2, 33, 150, 1)]
# Async decode sampled on the device: steady steps feed the sampled tokens back "on the device" (reset_batch=False).
DECODE_MODES = {"sync": {}, "async": {"async_decode": True},
                "async-fed": {"async_decode": True, "sample_on_device": True}}


@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder-only", "encoder-decoder"])
@pytest.mark.parametrize("config", [
    dict(),
    dict(max_num_batched_tokens=40),
    dict(enable_chunked_prefill=False),
    dict(num_kv_blocks=16, max_num_batched_tokens=50),
    dict(num_kv_blocks=16, preemption_mode="swap"),
    dict(num_kv_blocks=16, preemption_mode="recompute", max_num_seqs=6),
], ids=["roomy", "chunked-40", "unchunked", "small-pool", "small-pool-swap", "small-pool-recompute-6-slots"])
@pytest.mark.parametrize("decode", DECODE_MODES.values(), ids=DECODE_MODES.keys())
def test_mixed_workload_equals_solo_runs(encoder_decoder, config, decode):
    requests = workload(encoder_decoder, MIXED)
    expected = {r[0]: solo(encoder_decoder, r) for r in requests}
    engine = make_engine(encoder_decoder, **decode, **config)
    assert run(engine, requests, arrivals=[0, 0, 3, 5, 5, 20]) == expected
    if "sample_on_device" in decode:
        assert engine.runner.model.fed_steps > 0
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


@pytest.mark.parametrize("budget", [1, 8])
def test_n_sequences_fork_after_a_chunked_prompt_whose_last_token_runs_as_a_decode_step(budget):
    """A chunked prompt's last token runs in a decode step; its slot came with the prompt's blocks, so that step
    appends none. (It once did: the forks then counted the first output's slot as their own already, skipped the
    copy-on-write of the shared, partly filled last block, and both wrote their first output into it.)"""
    request = ("r", prompt(4, 31), params(3, n=2, seed=4))
    engine = make_engine(num_kv_blocks=16, max_num_batched_tokens=budget, enable_chunked_prefill=True,
                         max_num_seqs=3)
    assert run(engine, [request]) == {"r": solo(False, request)}


def test_n_sequences_share_the_prompt_blocks_and_the_cross_table():
    """What the model is handed once all three sequences decode: the full prompt block and the cross blocks are
    the same block ids in every row; only each sequence's partly filled last block is its own (copy-on-write)."""
    engine = make_engine(encoder_decoder=True)
    engine.add_request("r", prompt(0, 40, encoder_len=70), params(6, n=3, seed=3))
    model, kv = engine.runner.model, engine.scheduler.kv
    while not any(len(rows) == 3 for rows in model.decode_tables):
        engine.step()
    rows = model.decode_tables[-1]
    assert len(rows) == 3
    # 41 decoder tokens (the start token and 40) in blocks of 32; an encoder of 70 tokens needs 3 cross blocks.
    selfs, crosses = [table[:2] for table, _ in rows], [cross[:3] for _, cross in rows]
    assert selfs[0][0] == selfs[1][0] == selfs[2][0], selfs
    assert len({table[1] for table in selfs}) == 3, selfs
    assert crosses[0] == crosses[1] == crosses[2] and len(set(crosses[0]) | {t[0] for t in selfs}) == 4, crosses
    assert kv.num_blocks - kv.num_free_blocks == 3 + 1 + 3  # cross blocks, the shared block, three last blocks
    run(engine, [])


def test_an_encoder_spends_its_input_length_of_the_budget():
    """Each step's decoder tokens plus the input lengths of the encoders it runs stay within
    max_num_batched_tokens; an encoder larger than the budget runs alone. Counting decoder tokens only, all four
    requests would share the first step."""
    engine = make_engine(encoder_decoder=True, max_num_batched_tokens=40)
    run(engine, [(f"r{i}", prompt(i, 4, encoder_len=e), params(2)) for i, e in enumerate((30, 30, 5, 60))])
    model = engine.runner.model
    # Decoder prompts are 5 tokens (start token + 4). r0: 30 + 5; r1 (35 more) waits; r2 (10) fits after r1;
    # r3's encoder (60) exceeds the budget: it runs alone with one decoder token, then the rest without it.
    assert model.prefill_encoders == [[30], [30], [5], [60], [0]]
    assert model.prefill_chunks == [[(0, 5)], [(0, 5)], [(0, 5)], [(0, 1)], [(1, 5)]]


def test_llm_generate_checks_every_prompt_before_running_any(monkeypatch):
    """``LLM.generate`` with a bad prompt at the last index raises naming that index, and nothing ran: no model
    call, no request left, every block free. The same LLM then serves the good prompts."""
    engine = make_engine()
    monkeypatch.setattr(LLMEngine, "from_model", staticmethod(lambda *args, **kwargs: engine))
    llm = LLM("paged-hash-model", max_num_seqs=8, block_size=BLOCK, max_model_len=256)
    good = [prompt(i, 10) for i in range(3)]
    with pytest.raises(ValueError, match=r"^prompt 3: .*vocab"):
        llm.generate([*good, {"prompt_token_ids": [1, VOCAB]}], params(4), use_tqdm=False)
    kv = engine.scheduler.kv
    assert engine.runner.model.calls == [] and not engine.has_unfinished_requests()
    assert kv.num_free_blocks == kv.num_blocks
    outputs = llm.generate(good, params(4), use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [4, 4, 4]


def test_steps_are_all_prefill_or_all_decode():
    engine = make_engine(max_num_batched_tokens=48)
    run(engine, workload(False, MIXED), arrivals=[0, 1, 2, 3, 4, 5])
    assert set(engine.runner.model.calls) == {"prefill", "decode"}
    assert engine.stats["prefill_steps"] + engine.stats["decode_steps"] == len(engine.runner.model.calls)


def test_waiting_prompts_prefill_back_to_back_and_whole_while_sequences_decode():
    """Four prompts wait while one request runs, a budget of one prompt and a bit per step: as in vLLM, the prefill
    steps follow each other until every prompt is in, then all decode together; and no step ends in a split prompt
    (each prompt runs whole, from position 0)."""
    engine = make_engine(max_num_batched_tokens=20)
    engine.add_request("first", prompt(0, 10), params(30))
    engine.step()  # its prefill
    for i in range(1, 5):
        engine.add_request(f"r{i}", prompt(i, 16), params(30))
    for _ in range(6):
        engine.step()
    model = engine.runner.model
    assert model.calls[:7] == ["prefill"] * 5 + ["decode"] * 2
    assert model.prefill_chunks[:5] == [[(0, 10)], [(0, 16)], [(0, 16)], [(0, 16)], [(0, 16)]]


def test_fed_decode_issues_a_step_before_reading_the_last():
    """Sampled on the device by a model that feeds its tokens back, a steady decode step is issued before the one
    in flight is read (the device never waits for the host), and the outputs are still the solo runs'."""
    requests = workload(False, [(5, 0, 40, 1), (9, 0, 30, 1)])
    engine = make_engine(async_decode=True, sample_on_device=True)
    model, calls = engine.runner.model, []
    decode, read = model.decode_forward, model.read_decode_output
    model.decode_forward = lambda **kwargs: calls.append("issue") or decode(**kwargs)
    model.read_decode_output = lambda out, **kwargs: calls.append("read") or read(out, **kwargs)
    assert run(engine, requests) == {r[0]: solo(False, r) for r in requests}
    assert "issue,issue,read" in ",".join(calls)


def test_async_host_sampling_schedules_the_next_step_before_reading_the_last():
    """Async decode sampled on the host: while a steady decode step is in flight the next one is scheduled and its
    block tables synced; then the step in flight is read and sampled, and the next issued at once with its tokens.
    The outputs are the solo runs'."""
    requests = workload(False, [(5, 0, 40, 1), (9, 0, 30, 2)])
    engine = make_engine(async_decode=True)
    model, runner, calls = engine.runner.model, engine.runner, []
    decode, read, schedule, sync = model.decode_forward, model.read_decode_output, engine.scheduler.schedule, runner._sync
    model.decode_forward = lambda **kwargs: calls.append("issue") or decode(**kwargs)
    model.read_decode_output = lambda out, **kwargs: calls.append("read") or read(out, **kwargs)
    engine.scheduler.schedule = lambda: calls.append("schedule") or schedule()
    runner._sync = lambda *args: calls.append("sync") or sync(*args)
    assert run(engine, requests) == {r[0]: solo(False, r) for r in requests}
    steady = re.findall(r"issue,schedule(?:,sync)+,read(?=,issue)", ",".join(calls))
    assert len(steady) >= 30, calls  # of ~40 decode steps: the others follow a batch change, drained first


@pytest.mark.parametrize("decode", DECODE_MODES.values(), ids=DECODE_MODES.keys())
def test_abort_frees_blocks_everywhere(decode):
    """Aborted while waiting, running and swapped out: every block comes back."""
    engine = make_engine(num_kv_blocks=16, preemption_mode="swap", max_num_batched_tokens=32,
                         **decode)
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


def test_allowed_and_logprob_token_ids_through_the_engine():
    engine = make_engine()
    with pytest.raises(ValueError, match="allowed_token_ids contains out-of-vocab token id!"):
        engine.add_request("bad", prompt(0, 5), SamplingParams(allowed_token_ids=[1, VOCAB]))
    with pytest.raises(ValueError, match="in logprob_token_ids contain out-of-vocab token ids"):
        engine.add_request("bad", prompt(0, 5), SamplingParams(logprob_token_ids=[VOCAB]))
    free = run(engine, [("free", prompt(1, 5), params(6))])["free"][0]
    allowed = sorted({(t + 1) % VOCAB for t in free} | {3})
    limited = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, allowed_token_ids=allowed,
                             logprob_token_ids=[3, 4])
    engine.add_request("limited", prompt(1, 5), limited)
    while engine.has_unfinished_requests():
        [out] = engine.step()
    seq = out.outputs[0]
    assert set(seq.token_ids) <= set(allowed) and seq.token_ids[0] != free[0]
    assert [sorted(entry) for entry in seq.logprobs] == [sorted({3, 4, t}) for t in seq.token_ids]
    assert seq.cumulative_logprob == pytest.approx(sum(entry[t].logprob for entry, t in zip(seq.logprobs,
                                                                                             seq.token_ids)))


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
    stop=st.sampled_from([None, [5], [41, 60]]),
    decode=st.sampled_from(list(DECODE_MODES.values())),
)
def test_random_workloads_equal_solo_runs(encoder_decoder, lengths, arrivals, num_kv_blocks, budget, chunked, mode,
                                          max_num_seqs, stop, decode):
    """Solo runs are synchronous: with ``async_decode`` (its tokens fed back on the device or not) the outputs, stops
    included, are the same."""
    requests = workload(encoder_decoder, lengths, stop)
    config = dict(num_kv_blocks=num_kv_blocks, max_num_batched_tokens=budget if chunked else None,
                  enable_chunked_prefill=chunked, preemption_mode=mode, max_num_seqs=max_num_seqs, **decode)
    engine = make_engine(encoder_decoder, **config)
    fits = fitting(engine, requests)
    assert run(engine, fits, arrivals[:len(fits)]) == {r[0]: solo(encoder_decoder, r) for r in fits}
