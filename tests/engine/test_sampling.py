"""The host sampler against vLLM 0.25.1's semantics: parameter validation, the penalty formulas worked by
hand, top-k/top-p/min_p filters, per-request seeds, min_tokens, Whisper's suppress rules, allowed_token_ids,
raw logprobs (top-k and logprob_token_ids) and stop checks."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig

from tt_models.engine.logits_processors import LogitsRules
from tt_models.engine.sampler import Sampler
from tt_models.engine.sampling import RowState, SamplingParams
from tt_models.engine.stop_checks import check_stop


def row(prompt=(), output=(), eos=None, **params) -> RowState:
    return RowState(SamplingParams(**params), list(prompt), list(output), eos)


# --- SamplingParams -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be at least 1"),
    ({"n": 2, "temperature": 0.0}, "n must be 1 when using greedy sampling"),
    ({"presence_penalty": 2.5}, "presence_penalty must be in [-2, 2]"),
    ({"frequency_penalty": -2.1}, "frequency_penalty must be in [-2, 2]"),
    ({"repetition_penalty": 0.0}, "repetition_penalty must be greater than zero"),
    ({"repetition_penalty": math.inf}, "repetition_penalty must be a finite number"),
    ({"temperature": -0.1}, "temperature must be non-negative"),
    ({"temperature": 2.5}, "temperature must be in [0, 2]"),
    ({"temperature": math.nan}, "temperature must be a finite number"),
    ({"top_p": 0.0}, "top_p must be in (0, 1]"),
    ({"top_p": 1.5}, "top_p must be in (0, 1]"),
    ({"top_k": -2}, "top_k must be 0 (disable), or at least 1"),
    ({"min_p": 1.5}, "min_p must be in [0, 1]"),
    ({"max_tokens": 0}, "max_tokens must be at least 1"),
    ({"seed": 2**64, "temperature": 1.0}, "seed must be in [-2**63, 2**64), got 18446744073709551616"),
    ({"seed": -2**63 - 1}, "seed must be in [-2**63, 2**64)"),
    ({"min_tokens": -1}, "min_tokens must be greater than or equal to 0"),
    ({"min_tokens": 5, "max_tokens": 4}, "min_tokens must be less than or equal to max_tokens=4"),
    ({"logprobs": -2}, "logprobs must be non-negative or -1"),
    ({"stop_token_ids": [1, "2"]}, "stop_token_ids must contain only integers"),
    ({"stop": ["a", ""]}, "stop cannot contain an empty string"),
    ({"allowed_token_ids": []}, "allowed_token_ids is not None and empty!"),
    ({"allowed_token_ids": [1, 2.0]}, "allowed_token_ids must contain only integers"),
    ({"logprob_token_ids": list(range(129))}, "logprob_token_ids of length 129, which is greater than max allowed"),
    ({"logprob_token_ids": [1, 2], "logprobs": 3}, "logprobs must equal len(logprob_token_ids)"),
])
def test_invalid_params_raise_vllm_messages(kwargs, message):
    with pytest.raises(ValueError) as err:
        SamplingParams(**kwargs)
    assert message in str(err.value)


def test_token_ids_are_verified_against_the_vocabulary():
    SamplingParams(allowed_token_ids=[0, 9], logprob_token_ids=[0, 9]).verify(10, 10)
    with pytest.raises(ValueError, match="allowed_token_ids contains out-of-vocab token id!"):
        SamplingParams(allowed_token_ids=[3, 10]).verify(10, None)
    with pytest.raises(ValueError, match="allowed_token_ids contains out-of-vocab token id!"):
        SamplingParams(allowed_token_ids=[-1]).verify(10, 10)
    with pytest.raises(ValueError, match="allowed_token_ids contains out-of-vocab token id!"):
        SamplingParams(allowed_token_ids=[8]).verify(10, 8)  # the tokenizer's size, as vLLM checks it
    with pytest.raises(ValueError, match=r"token_id\(s\) \[10\] in logprob_token_ids contain out-of-vocab"):
        SamplingParams(logprob_token_ids=[1, 10]).verify(10, 20)
    assert SamplingParams(logprob_token_ids=[4, 5, 6]).num_logprobs == 3
    assert SamplingParams(logprobs=2).num_logprobs == 2 and SamplingParams().num_logprobs is None


def test_top_k_must_be_an_integer():
    with pytest.raises(TypeError, match="top_k must be an integer"):
        SamplingParams(top_k=2.5)


def test_defaults_and_normalisation_match_vllm():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.min_p, p.seed, p.max_tokens, p.min_tokens) == \
        (1, 1.0, 1.0, 0, 0.0, None, 16, 0)
    assert (p.stop, p.stop_token_ids, p.ignore_eos, p.logprobs) == ([], [], False, None)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.include_stop_str_in_output, p.skip_special_tokens, p.greedy) == (False, True, False)

    assert SamplingParams(stop="###").stop == ["###"]
    assert SamplingParams(top_k=-1).top_k == -1  # accepted as "all", like 0
    assert SamplingParams(seed=-1).seed is None
    assert SamplingParams(logprobs=True).logprobs == 1
    tiny = SamplingParams(temperature=1e-6)  # vLLM raises tiny temperatures before it tests for greedy
    assert tiny.temperature == 0.01 and not tiny.greedy
    greedy = SamplingParams(temperature=0.0, top_k=5, top_p=0.5, min_p=0.2)
    assert greedy.greedy and (greedy.top_k, greedy.top_p, greedy.min_p) == (0, 1.0, 0.0)


# --- greedy and penalties -------------------------------------------------------------------------------

def test_greedy_is_argmax_and_leaves_the_input_alone():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    before = logits.clone()
    out = Sampler().sample(logits, [row(temperature=0.0) for _ in range(5)])
    assert torch.equal(out.tokens, before.argmax(dim=-1))
    assert torch.equal(logits, before)
    assert out.logprobs == [None] * 5


def test_penalties_match_vllm_formulas():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0, 1.0]] * 2)
    rows = [
        row(prompt=[0, 4], output=[2, 2, 1], repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25),
        row(prompt=[0, 4], output=[2, 2, 1]),  # defaults: untouched
    ]
    # repetition (prompt + output): positive / 2, negative * 2; then -0.5 * count - 0.25 * [count > 0] (output)
    expected = [
        2.0 / 2,  # in the prompt only
        -1.0 * 2 - 0.5 * 1 - 0.25,  # generated once
        0.5 / 2 - 0.5 * 2 - 0.25,  # generated twice
        3.0,  # never seen
        -2.0 * 2,  # in the prompt only
        1.0,
    ]
    got = Sampler().process(logits, rows)
    torch.testing.assert_close(got[0], torch.tensor(expected))
    torch.testing.assert_close(got[1], logits[1])


def test_negative_penalties_encourage_repeats():
    logits = torch.tensor([[1.0, 1.2, -3.0]])
    got = Sampler().process(logits, [row(output=[0, 0], frequency_penalty=-0.5, presence_penalty=-0.1,
                                         repetition_penalty=0.5)])
    torch.testing.assert_close(got[0], torch.tensor([1.0 / 0.5 + 0.5 * 2 + 0.1, 1.2, -3.0]))


# --- random sampling ------------------------------------------------------------------------------------

distinct_logits = st.lists(st.floats(-8, 8, allow_nan=False, width=32), min_size=2, max_size=24,
                           unique=True).map(lambda xs: torch.tensor([xs], dtype=torch.float32))


@settings(max_examples=150, deadline=None)
@given(logits=distinct_logits, top_k=st.integers(0, 30), top_p=st.floats(0.01, 1.0),
       temperature=st.floats(0.05, 2.0), seed=st.integers(0, 2**31))
def test_sampled_token_lies_in_the_top_k_top_p_set(logits, top_k, top_p, temperature, seed):
    token = int(Sampler().sample(logits, [row(top_k=top_k, top_p=top_p, temperature=temperature, seed=seed)]).tokens)
    scaled = logits[0] / temperature
    higher = scaled > scaled[token]
    if 0 < top_k < logits.shape[1]:
        assert int(higher.sum()) < top_k
        kept = scaled >= scaled.topk(top_k).values[-1]
    else:
        kept = torch.ones_like(higher)
    probs = scaled.masked_fill(~kept, -math.inf).softmax(dim=-1)
    assert float(probs[higher].sum()) < top_p + 1e-5  # the tokens above it fill less than the nucleus


@settings(max_examples=100, deadline=None)
@given(logits=distinct_logits, temperature=st.floats(0.05, 2.0), top_p=st.floats(0.01, 1.0))
def test_top_k_1_is_greedy(logits, temperature, top_p):
    assume(len(set((logits[0] / temperature).tolist())) == logits.shape[1])
    out = Sampler().sample(logits, [row(top_k=1, temperature=temperature, top_p=top_p)])
    assert int(out.tokens) == int(logits.argmax())


def frequencies(params: dict, logits: list[float], n: int = 20000) -> torch.Tensor:
    torch.manual_seed(0)
    out = Sampler().sample(torch.tensor([logits] * n), [row(**params) for _ in range(n)])
    return torch.bincount(out.tokens, minlength=len(logits)) / n


@pytest.mark.parametrize("params, expected", [
    ({}, [0.1, 0.2, 0.3, 0.4]),
    ({"temperature": 0.5}, [1 / 30, 4 / 30, 9 / 30, 16 / 30]),  # p ** (1 / T), renormalised
    ({"top_k": 2}, [0.0, 0.0, 3 / 7, 4 / 7]),
    ({"top_p": 0.65}, [0.0, 0.0, 3 / 7, 4 / 7]),  # ascending cumsum 0.1, 0.3 <= 0.35 are dropped
    ({"top_p": 0.75}, [0.0, 2 / 9, 3 / 9, 4 / 9]),
    ({"min_p": 0.4}, [0.0, 2 / 9, 3 / 9, 4 / 9]),  # below 0.4 * the top probability (0.16) is dropped
])
def test_sampling_follows_the_filtered_distribution(params, expected):
    logits = [math.log(x) for x in (0.1, 0.2, 0.3, 0.4)]
    torch.testing.assert_close(frequencies(params, logits), torch.tensor(expected), atol=0.015, rtol=0)


def test_seeded_rows_ignore_batch_composition():
    vocab = 1000
    gen = torch.Generator().manual_seed(1)
    steps = [torch.randn(4, vocab, generator=gen) for _ in range(6)]

    def run(batch_rows: list[RowState], at: int) -> list[int]:
        tokens = []
        for logits in steps:
            batch = logits[:len(batch_rows)].clone()
            batch[at] = logits[0]  # the tracked request always sees the same logits
            out = Sampler().sample(batch, batch_rows)
            for r, t in zip(batch_rows, out.tokens.tolist()):
                r.output_token_ids.append(t)
            tokens.append(int(out.tokens[at]))
        return tokens

    alone = run([row(seed=7, top_p=0.95)], 0)
    crowded = run([row(), row(seed=3), row(seed=7, top_p=0.95), row(temperature=0.0)], 2)
    assert alone == crowded
    assert run([row(seed=8, top_p=0.95)], 0) != alone


# --- min_tokens and model rules -------------------------------------------------------------------------

def test_min_tokens_masks_eos_and_stop_tokens():
    eos, stop_id = 3, 4
    logits = torch.tensor([[0.0, 1.0, 2.0, 10.0, 9.0]])
    for generated in range(4):
        params = dict(temperature=0.0, min_tokens=3, stop_token_ids=[stop_id])
        token = int(Sampler().sample(logits, [row(output=[1] * generated, eos=eos, **params)]).tokens)
        assert token == (eos if generated >= 3 else 2)
    # vLLM counts eos among the masked ids even with ignore_eos (all_stop_token_ids)
    assert int(Sampler().sample(logits, [row(eos=eos, temperature=0.0, min_tokens=1, ignore_eos=True)]).tokens) == 4


def test_rules_from_generation_config():
    whisper = GenerationConfig(suppress_tokens=[1, 5], begin_suppress_tokens=[220, 50257])
    assert LogitsRules.from_generation_config(whisper) == LogitsRules((1, 5), (220, 50257))
    assert LogitsRules.from_generation_config({"begin_suppress_tokens": [2]}) == LogitsRules((), (2,))
    assert LogitsRules.from_generation_config(GenerationConfig()) == LogitsRules()
    assert LogitsRules.from_generation_config(None) == LogitsRules()


def test_suppress_always_and_begin_suppress_at_step_0_only():
    sampler = Sampler(LogitsRules(suppress_tokens=(1,), begin_suppress_tokens=(2,)))
    logits = torch.tensor([[0.0, 9.0, 8.0, 7.0]] * 2)
    out = sampler.sample(logits, [row(temperature=0.0), row(output=[3], temperature=0.0)])
    assert out.tokens.tolist() == [3, 2]
    processed = sampler.process(logits, [row(), row(output=[3])])
    assert processed[0, 1] == processed[0, 2] == processed[1, 1] == -math.inf and processed[1, 2] == 8.0


# --- allowed_token_ids ----------------------------------------------------------------------------------

def test_allowed_token_ids_mask_every_other_token_per_row():
    logits = torch.tensor([[9.0, 1.0, 3.0, 2.0, 8.0]] * 3)
    rows = [row(temperature=0.0, allowed_token_ids=[1, 3]), row(temperature=0.0),
            row(temperature=0.0, allowed_token_ids=[2, 1])]
    assert Sampler().sample(logits, rows).tokens.tolist() == [3, 0, 2]
    processed = Sampler().process(logits, rows)
    inf = -math.inf
    assert processed.tolist() == [[inf, 1.0, inf, 2.0, inf], logits[1].tolist(), [inf, 1.0, 3.0, inf, inf]]


def test_sampling_draws_only_allowed_tokens():
    logits = torch.randn(64, 40, generator=torch.Generator().manual_seed(3)) * 4
    allowed = [5, 17, 23]
    rows = [row(temperature=1.5, seed=i, allowed_token_ids=allowed) for i in range(64)]
    drawn = Sampler().sample(logits, rows).tokens.tolist()
    assert set(drawn) <= set(allowed) and len(set(drawn)) > 1


def test_allowed_tokens_are_masked_before_min_tokens_and_rules():
    eos = 3
    logits = torch.tensor([[0.0, 1.0, 2.0, 10.0, 9.0]])
    sampler = Sampler(LogitsRules(suppress_tokens=(4,)))
    # eos is allowed but min_tokens holds it back, 4 is allowed but suppressed: the allowed 1 beats the higher 2
    token = sampler.sample(logits, [row(eos=eos, temperature=0.0, min_tokens=1, allowed_token_ids=[1, 3, 4])]).tokens
    assert token.tolist() == [1]


# --- logprobs -------------------------------------------------------------------------------------------

def test_logprobs_are_raw_and_shaped_per_row():
    vocab = 32
    logits = torch.randn(4, vocab, generator=torch.Generator().manual_seed(2)) * 3
    rows = [
        row(logprobs=3, temperature=0.7, repetition_penalty=1.8, prompt=[0, 1], output=[2]),
        row(logprobs=0, temperature=0.0, min_tokens=2, eos=int(logits[1].argmax())),
        row(),
        row(logprobs=-1, presence_penalty=1.5, output=[5, 6], seed=0),
    ]
    out = Sampler().sample(logits, rows)
    raw = logits.log_softmax(dim=-1)
    assert out.logprobs[2] is None
    assert [len(lp.top) for lp in (out.logprobs[0], out.logprobs[1], out.logprobs[3])] == [3, 0, vocab]
    assert int(out.tokens[1]) != int(logits[1].argmax())  # min_tokens moved the choice, not the logprobs
    for i in (0, 1, 3):
        lp = out.logprobs[i]
        token = int(out.tokens[i])
        assert lp.token_id == token
        assert lp.logprob == pytest.approx(float(raw[i, token]), abs=1e-6)
        assert lp.rank == 1 + int((raw[i] > raw[i, token]).sum())
        values, indices = raw[i].topk(len(lp.top))
        assert [t for t, _ in lp.top] == indices.tolist()
        assert [v for _, v in lp.top] == pytest.approx(values.tolist(), abs=1e-6)


def test_logprob_token_ids_are_raw_in_their_order_beside_top_k_rows():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(4)) * 2
    raw = logits.log_softmax(dim=-1)
    ids = [7, 2, 19, 11]
    rows = [row(temperature=0.0, logprob_token_ids=ids, allowed_token_ids=[2, 11]), row(logprobs=2, seed=1),
            row(temperature=0.0, logprob_token_ids=[5], logprobs=1)]
    out = Sampler().sample(logits, rows)
    first = out.logprobs[0]
    assert [t for t, _ in first.top] == ids
    # raw: the allowed_token_ids mask changes the choice, not the reported logprobs
    assert [v for _, v in first.top] == pytest.approx([float(raw[0, t]) for t in ids], abs=1e-6)
    assert first.token_id == (2 if raw[0, 2] > raw[0, 11] else 11)
    assert first.rank == 1 + int((raw[0] > raw[0, first.token_id]).sum())
    assert [t for t, _ in out.logprobs[1].top] == raw[1].topk(2).indices.tolist()
    assert out.logprobs[2].top == [(5, pytest.approx(float(raw[2, 5]), abs=1e-6))]


# --- stop checks ----------------------------------------------------------------------------------------

def test_eos_and_stop_token_ids_stop_and_drop_their_text():
    p = SamplingParams(stop_token_ids=[7], max_tokens=10)
    assert check_stop([5, 2], "hi</s>", p, eos_token_id=2, new_text_len=4) == (True, "stop", None, "hi")
    assert check_stop([5, 7], "hi.", p, eos_token_id=2, new_text_len=1) == (True, "stop", 7, "hi")
    kept = SamplingParams(stop_token_ids=[7], include_stop_str_in_output=True)
    assert check_stop([5, 7], "hi.", kept, eos_token_id=2, new_text_len=1) == (True, "stop", 7, "hi.")
    assert check_stop([5, 2], "hi", SamplingParams(ignore_eos=True), 2, 0) == (False, None, None, "hi")
    assert check_stop([5, 6], "hi", p, 2, 1) == (False, None, None, "hi")


def test_max_tokens_is_length_unless_a_stop_string_ends_it():
    p = SamplingParams(max_tokens=3, stop=["END"])
    assert check_stop([1, 2, 3], "a b c", p, None, 2) == (True, "length", None, "a b c")
    assert check_stop([1, 2, 3], "a bEND", p, None, 3) == (True, "stop", "END", "a b")
    assert check_stop([1, 2], "a b", SamplingParams(max_tokens=None), None, 2).finished is False


def test_stop_strings_truncate_and_may_span_tokens():
    p = SamplingParams(stop=["\n\n", "###"])
    assert check_stop([1, 2], "one\n\ntwo", p, None, 4) == (True, "stop", "\n\n", "one")
    assert check_stop([1, 2], "ab##", p, None, 1) == (False, None, None, "ab##")
    assert check_stop([1, 2, 3], "ab###x", p, None, 2) == (True, "stop", "###", "ab")
    kept = SamplingParams(stop=["###"], include_stop_str_in_output=True)
    assert check_stop([1, 2, 3], "ab###x", kept, None, 2) == (True, "stop", "###", "ab###")


def test_min_tokens_delays_every_stop():
    p = SamplingParams(min_tokens=2, stop=["x"], max_tokens=5)
    assert check_stop([2], "x", p, eos_token_id=2, new_text_len=1) == (False, None, None, "x")
    # at min_tokens the token checks run but stop strings wait for the next token; text made during
    # the first min_tokens tokens never matches later
    assert check_stop([1, 2], "xx", p, eos_token_id=2, new_text_len=1) == (True, "stop", None, "x")
    assert check_stop([1, 1], "xx", p, eos_token_id=2, new_text_len=1).finished is False
    assert check_stop([1, 1, 1], "xxa", p, eos_token_id=2, new_text_len=1).finished is False
    assert check_stop([1, 1, 1], "xxax", p, eos_token_id=2, new_text_len=2) == (True, "stop", "x", "xxa")


# --- Whisper's timestamp rules ----------------------------------------------------------------------------

def test_timestamp_rules_equal_hf_whisper_timestamp_processor():
    """``TimestampRules`` against HF's ``WhisperTimeStampLogitsProcessor`` on random outputs (text, timestamps in
    pairs and alone, eos) and random logits, some peaked on the timestamps: the same -inf masks and the same
    forced timestamps, row by row; rows that did not ask for timestamps are left alone."""
    from transformers.generation.logits_process import WhisperTimeStampLogitsProcessor

    eos, no_timestamps, vocab, max_initial = 10, 12, 48, 5
    config = GenerationConfig(eos_token_id=eos, no_timestamps_token_id=no_timestamps,
                              max_initial_timestamp_index=max_initial)
    rules = LogitsRules.from_generation_config(config)
    assert rules.timestamps is not None and rules.timestamps.timestamp_begin == no_timestamps + 1
    prompt = [11, 9, 8]  # HF's begin_index: the decoder prompt's length
    hf = WhisperTimeStampLogitsProcessor(config, begin_index=len(prompt))
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        length = int(torch.randint(0, 8, (1,), generator=gen))
        output = [int(t) for t in torch.randint(0, vocab, (length,), generator=gen)]
        logits = torch.randn(3, vocab, generator=gen) * 3
        logits[1, no_timestamps + 1:] += 4 * (trial % 2)  # timestamp-heavy rows force a timestamp
        rows = [row(prompt, output, temperature=0.0, extra_args={"timestamps": True}) for _ in range(2)] \
            + [row(prompt, output, temperature=0.0)]
        ours = Sampler(LogitsRules(timestamps=rules.timestamps)).process(logits, rows)
        expected = hf(torch.tensor([prompt + output] * 2), logits[:2])
        assert torch.equal(ours[:2], expected), (output, ours[:2], expected)
        assert torch.equal(ours[2], logits[2])


def test_timestamp_history_is_incremental():
    state = row(output=[1], extra_args={"timestamps": True})
    assert state.timestamp_history(20) == (0, 1, 20, 0)  # one output: HF counts the missing one as a timestamp
    state.output_token_ids += [25, 3]
    assert state.timestamp_history(20) == (0, 1, 26, 0)  # after a segment's start: strictly later
    state.output_token_ids += [30]
    assert state.timestamp_history(20) == (1, 0, 30, 0)  # a lone end timestamp may repeat as the next start
    assert row().timestamps is False and row(output=[]).timestamp_history(20) == (0, 1, 20, 1)
