"""A sequence without stop strings builds its text only when an output asks for it; the text, and where it is cut
for a stop token, must be what the per-token path (the one stop strings need) gives, with a real tokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.engine.detokenizer import IncrementalDetokenizer
from tt_models.engine.inputs import ProcessedInputs
from tt_models.engine.request import Request, Sequence
from tt_models.engine.sampling import SamplingParams
from tt_models.engine.stop_checks import check_stop_tokens

NEVER = "\x00never\x00"  # a stop string no output contains: it only makes the sequence detokenize every token


@pytest.fixture(scope="module")
def tokenizer():
    return load_hf_checkpoint("smollm2-135m-instruct").tokenizer


def sequence(tokenizer, prompt: list[int], params: SamplingParams, eos: int) -> Sequence:
    request = Request("r", ProcessedInputs(prompt, None), params, 0.0, eos, max_model_len=4096)
    detokenizer = IncrementalDetokenizer(tokenizer, prompt, params.skip_special_tokens)
    return Sequence(0, request, 0, request.child_params(0), detokenizer)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), include_stop=st.booleans(), skip_special=st.booleans(),
       ending=st.sampled_from(["eos", "stop token", "length"]))
def test_lazy_text_equals_per_token_text(tokenizer, data, include_stop: bool, skip_special: bool, ending: str):
    vocab = len(tokenizer)
    eos, stop_token = tokenizer.eos_token_id, 1  # <|im_end|> and <|im_start|>: special tokens
    token = st.integers(0, vocab - 1).filter(lambda t: t not in (eos, stop_token))
    prompt = data.draw(st.lists(token, min_size=1, max_size=8))
    outputs = data.draw(st.lists(token, min_size=0, max_size=24))
    outputs.append({"eos": eos, "stop token": stop_token, "length": data.draw(token)}[ending])
    common = dict(temperature=0.0, max_tokens=len(outputs), stop_token_ids=[stop_token],
                  include_stop_str_in_output=include_stop, skip_special_tokens=skip_special)
    lazy = sequence(tokenizer, prompt, SamplingParams(**common), eos)
    eager = sequence(tokenizer, prompt, SamplingParams(stop=[NEVER], **common), eos)
    assert lazy.lazy_text and not eager.lazy_text
    for i, t in enumerate(outputs):
        for seq in (lazy, eager):
            seq.append_token(t, None)
        if i % 5 == 0:  # a streamed output midway
            assert lazy.text == eager.text
    assert (lazy.finish_reason, lazy.stop_reason) == (eager.finish_reason, eager.stop_reason)
    assert lazy.finish_reason == ("length" if ending == "length" else "stop")
    assert lazy.text == eager.text
    assert lazy.completion().text == eager.completion().text


@settings(max_examples=200, deadline=None)
@given(outputs=st.lists(st.integers(0, 5), min_size=1, max_size=12), stops=st.lists(st.integers(0, 5), max_size=3),
       min_tokens=st.integers(0, 4), ignore_eos=st.booleans(), max_tokens=st.none() | st.integers(4, 12))
def test_lazy_stop_checks_are_check_stop_tokens(outputs, stops, min_tokens, ignore_eos, max_tokens):
    """The lazy path's token checks (inlined on what the sequence knows from the start) finish a sequence where
    ``check_stop_tokens`` does, with its finish and stop reasons: eos (id 0 here) before ``stop_token_ids``, nothing
    before ``min_tokens``, ``ignore_eos``."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, min_tokens=min_tokens, stop_token_ids=stops,
                            ignore_eos=ignore_eos)
    seq = sequence(None, [7], params, eos=0)
    assert seq.lazy_text
    for i, token in enumerate(outputs):
        seq.append_token(token, None)
        want = check_stop_tokens(outputs[: i + 1], seq.state.params, 0)
        assert (seq.finish_reason, seq.stop_reason) == (want or (None, None))
        if want is not None:
            break
