"""Structured outputs in the engine, on a tiny random Llama with SmolLM2's real 49k vocabulary (host backend): greedy
and sampled outputs under a JSON schema, a regex, a choice and an EBNF grammar are complete and valid, beside
unconstrained requests whose tokens the constrained ones leave unchanged; preemption by recomputation changes no
constrained output, nor do async decode and device sampling (a constrained row is sampled on the host); a bad
constraint is refused at ``add_request`` while the engine serves the others; a request waits while its grammar
compiles on the compiler's thread, and the others run meanwhile; a token its grammar refuses (min_tokens masking the
stop) is logged with the sequence's name."""

from __future__ import annotations

import json
import logging
import re
import threading

import jsonschema
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams
from tt_models.engine.structured_output import StructuredOutputsParams

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "pet"],
          "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pet": {"enum": ["cat", "dog", None]}}}
REGEX = r"[A-Z][a-z]{2,5}-\d{3}"
CHOICES = ["yes", "no", 'say "maybe"']
GRAMMAR = 'root ::= "(" digit ("+" digit)* ")"\ndigit ::= [0-9]'
TOKENS = 48
pytestmark = pytest.mark.slow


def write_tiny_llama(path) -> str:
    """A random 2-layer Llama over SmolLM2's tokenizer (its eos ``<|im_end|>``, its chat template), saved with it."""
    tokenizer = load_hf_checkpoint("smollm2-135m-instruct").tokenizer
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, initializer_range=0.3, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return load_hf_checkpoint(write_tiny_llama(tmp_path_factory.mktemp("tiny-llama-smollm2-vocab")))


def constrained(**constraint) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=TOKENS,
                          structured_outputs=StructuredOutputsParams(disable_any_whitespace=True, **constraint))


REQUESTS = {
    "json": constrained(json=SCHEMA),
    "json-text": constrained(json=json.dumps(SCHEMA)),
    "regex": constrained(regex=REGEX),
    "choice": constrained(choice=CHOICES),
    "grammar": constrained(grammar=GRAMMAR),
    "sampled": SamplingParams(temperature=1.0, seed=3, n=2, max_tokens=TOKENS,
                              structured_outputs=StructuredOutputsParams(regex=REGEX)),
}
FREE = {"free-greedy": SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True),
        "free-sampled": SamplingParams(temperature=1.0, seed=5, max_tokens=12, ignore_eos=True)}
PROMPTS = ["Give me a person as JSON:", "A code:", "Well?", "Sum:", "Once upon a time", "The capital of France is"]


def run(checkpoint, requests: dict[str, SamplingParams], **config) -> tuple[dict[str, list], LLMEngine]:
    """Each request's finished outputs; they are all queued at once and their grammars compiled before the first
    step."""
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=16, block_size=32, max_model_len=64, **config),
                       backend="host", optimizations="accuracy")
    for i, (request_id, params) in enumerate(requests.items()):
        engine.add_request(request_id, PROMPTS[i % len(PROMPTS)], params)
    for request in engine._compiling:  # every request runs from the first step: the schedule (and so whether the
        request.grammar.exception()   # small pool preempts) must not depend on how fast the grammars compile
    outputs = {}
    while engine.has_unfinished_requests():
        outputs.update((o.request_id, o.outputs) for o in engine.step() if o.finished)
    # Nothing is left behind: no request, no grammar being watched, every KV block free.
    assert not engine.requests and not engine._compiling
    assert all(kv.num_free_blocks == kv.num_blocks for kv in engine.scheduler.kvs)
    engine.close()
    return outputs, engine


def check(outputs: dict[str, list]) -> None:
    for request_id, seqs in outputs.items():
        if request_id.startswith("free"):
            continue
        for seq in seqs:
            assert seq.finish_reason == "stop", (request_id, seq.text)
            text = seq.text
            if request_id.startswith("json"):
                jsonschema.validate(json.loads(text), SCHEMA)
            elif request_id == "choice":
                assert text in CHOICES
            elif request_id == "grammar":
                assert re.fullmatch(r"\(\d(\+\d)*\)", text), text
            else:
                assert re.fullmatch(REGEX, text), text


@pytest.fixture(scope="module")
def together(checkpoint):
    outputs, _ = run(checkpoint, REQUESTS | FREE)
    return outputs


def test_constrained_outputs_are_valid_and_leave_others_unchanged(checkpoint, together):
    check(together)
    assert len(together["sampled"]) == 2
    free, _ = run(checkpoint, FREE)
    for request_id in FREE:
        assert together[request_id][0].token_ids == free[request_id][0].token_ids


@pytest.mark.parametrize("config", [{"num_kv_blocks": 6, "preemption_mode": "recompute"}, {"async_decode": True},
                                    {"sample_on_device": True}], ids=["preempted", "async", "sample-on-device"])
def test_constrained_outputs_are_unchanged_by_preemption_async_decode_and_device_sampling(checkpoint, together,
                                                                                          config):
    outputs, engine = run(checkpoint, REQUESTS | FREE, **config)
    check(outputs)
    if "num_kv_blocks" in config:
        assert engine.scheduler.num_preemptions > 0
    for request_id in REQUESTS:
        assert [s.token_ids for s in outputs[request_id]] == [s.token_ids for s in together[request_id]]


def test_bad_constraints_are_refused_at_add_request(checkpoint):
    with pytest.raises(ValueError, match="one kind of structured outputs constraint"):
        StructuredOutputsParams(json=SCHEMA, regex=REGEX)
    with pytest.raises(ValueError, match="none are specified"):
        StructuredOutputsParams()
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=4, block_size=32, max_model_len=128), backend="host",
                       optimizations="accuracy")
    engine.add_request("good", "Hello", REQUESTS["regex"])
    bad = {"JSON schema: .*Unsupported type": StructuredOutputsParams(json={"type": "foo"}),
           "JSON schema: .*Failed to parse JSON": StructuredOutputsParams(json="{not json"),
           "JSON schema: xgrammar cannot enforce uniqueItems": StructuredOutputsParams(
               json={"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}),
           "regex: .*parenthesis is not closed": StructuredOutputsParams(regex="a(b"),
           "grammar: .*EBNF parser error": StructuredOutputsParams(grammar='root ::= "a" |')}
    for message, params in bad.items():
        with pytest.raises(ValueError, match=f"invalid structured outputs {message}"):
            engine.add_request("bad", "Hello", SamplingParams(structured_outputs=params))
        assert "bad" not in engine.requests
    outputs = {}
    while engine.has_unfinished_requests():
        outputs.update((o.request_id, o.outputs) for o in engine.step() if o.finished)
    engine.close()
    assert re.fullmatch(REGEX, outputs["good"][0].text)


def test_a_request_waits_while_its_grammar_compiles(checkpoint):
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=4, block_size=32, max_model_len=64), backend="host",
                       optimizations="accuracy")
    release = threading.Event()
    compile_grammar = engine.grammars._compile

    def held(grammar):
        assert release.wait(timeout=60)
        return compile_grammar(grammar)

    engine.grammars._compile = held
    finished = {}
    try:
        engine.add_request("constrained", PROMPTS[1], REQUESTS["regex"])
        engine.add_request("free", PROMPTS[4], FREE["free-greedy"])
        while "free" not in finished:  # the free request runs to its end while the grammar is held
            finished.update((o.request_id, o.outputs[0]) for o in engine.step() if o.finished)
            assert not engine.requests["constrained"].seqs[0].output_token_ids
        release.set()
        while engine.has_unfinished_requests():
            finished.update((o.request_id, o.outputs[0]) for o in engine.step() if o.finished)
    finally:
        release.set()
        engine.close()
    assert re.fullmatch(REGEX, finished["constrained"].text)


def test_a_grammar_that_fails_to_compile_ends_its_request_alone(checkpoint):
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=4, block_size=32, max_model_len=64), backend="host",
                       optimizations="accuracy")

    def broken(grammar):
        raise RuntimeError("out of memory in the compiler")

    engine.grammars._compile = broken
    finished = {}
    try:
        engine.add_request("constrained", PROMPTS[1], REQUESTS["regex"])
        engine.add_request("free", PROMPTS[4], FREE["free-greedy"])
        while engine.has_unfinished_requests():
            finished.update((o.request_id, o) for o in engine.step() if o.finished)
    finally:
        engine.close()
    assert "failed to compile: out of memory in the compiler" in str(finished["constrained"].error)
    assert finished["free"].error is None and finished["free"].outputs[0].token_ids
    assert engine.scheduler.kv.num_free_blocks == engine.config.num_kv_blocks


def test_a_token_its_grammar_refuses_is_logged_with_its_sequence(checkpoint, caplog):
    """min_tokens masks the stop token, which is all a finished choice allows: the token then picked does not fit
    the grammar, and the log line names the sequence it went to."""
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=4, block_size=32, max_model_len=64), backend="host",
                       optimizations="accuracy")
    params = SamplingParams(temperature=0.0, max_tokens=6, min_tokens=6,
                            structured_outputs=StructuredOutputsParams(choice=["yes"]))
    try:
        with caplog.at_level(logging.ERROR, logger="tt_models.engine.structured_output"):
            engine.add_request("forced", PROMPTS[1], params)
            engine.add_request("free", PROMPTS[4], FREE["free-greedy"])
            while engine.has_unfinished_requests():
                engine.step()
    finally:
        engine.close()
    refused = [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()]
    assert refused and all(m.startswith("sequence forced#0: token ") for m in refused), caplog.text
