"""The engine's grammar masks, token by token, against xgrammar driven independently as vLLM 0.25.1's xgrammar
backend drives it (``vllm/v1/structured_output/backend_xgrammar.py``): the tokenizer info from the HF tokenizer at
the model's vocabulary size (no stop ids passed: xgrammar finds the eos), ``compile_json_schema(any_whitespace=not
disable_any_whitespace)``, ``{"type": "object"}`` for ``json_object``, ``compile_regex``, ``compile_grammar`` and
vLLM's ``choice_as_grammar``. For each constrained sequence of a batch, every step's mask the engine applied equals
the independent matcher's bitmask, the sampled token is allowed, a greedy token is the argmax of the model's logits
under that mask, and the matcher ends terminated. The tiny random Llama over SmolLM2's vocabulary, greedy, sampled
and n = 2, beside an unconstrained request. (tests/vllm/test_plugin_structured_outputs.py compares the tokens with
vLLM's own engine; this checks every mask, sampled rows' too.)"""

from __future__ import annotations

import json
import re
from collections import defaultdict

import numpy as np
import pytest
import torch
import xgrammar as xgr

import tt_models.engine.sampler as sampler_module
from tests.engine.test_structured_output import CHOICES, GRAMMAR, REGEX, SCHEMA, write_tiny_llama
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import RowState, SamplingParams
from tt_models.engine.structured_output import Guide, StructuredOutputsParams

pytestmark = pytest.mark.slow
ITEM = {"type": "object", "required": ["id"],
        "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}}}
NESTED = {"type": "object", "required": ["items"],
          "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": ITEM}}}
CONSTRAINTS = {"json": StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True),
               "nested-json": StructuredOutputsParams(json=NESTED, disable_any_whitespace=True),
               "json-object": StructuredOutputsParams(json_object=True),  # any whitespace, vLLM's default
               "regex": StructuredOutputsParams(regex=REGEX),
               "choice": StructuredOutputsParams(choice=CHOICES),
               "grammar": StructuredOutputsParams(grammar=GRAMMAR)}
SAMPLING = {"greedy": {"temperature": 0.0}, "sampled": {"temperature": 1.0, "seed": 7},
            "n2": {"temperature": 0.7, "seed": 11, "n": 2}}
MAX_TOKENS = 64


def choice_as_grammar(choice: list[str]) -> str:
    """vLLM 0.25.1's (``vllm/v1/structured_output/utils.py``)."""
    escaped = (re.sub(r'(["\\])', r"\\\1", c) for c in choice)
    return "root ::= " + " | ".join(f'"{c}"' for c in escaped)


def compile_as_vllm(compiler: xgr.GrammarCompiler, params: StructuredOutputsParams) -> xgr.CompiledGrammar:
    if params.json is not None:
        return compiler.compile_json_schema(json.dumps(params.json), any_whitespace=not params.disable_any_whitespace)
    if params.json_object:
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=not params.disable_any_whitespace)
    if params.regex is not None:
        return compiler.compile_regex(params.regex)
    if params.choice is not None:
        return compiler.compile_grammar(choice_as_grammar(params.choice))
    return compiler.compile_grammar(params.grammar)


def allowed(matcher: xgr.GrammarMatcher, vocab: int) -> np.ndarray:
    """The matcher's next-token bitmask, unpacked (bit t of 32-bit word w allows token 32 w + t)."""
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    matcher.fill_next_token_bitmask(bitmask)
    return np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:vocab].astype(bool)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return load_hf_checkpoint(write_tiny_llama(tmp_path_factory.mktemp("tiny-llama-smollm2-vocab")))


def test_engine_masks_equal_independent_xgrammar(checkpoint, monkeypatch):
    # What the engine did, per sequence: the logits its sampler got and the tokens its mask left (both per step).
    steps: dict[Guide, list[tuple[torch.Tensor, np.ndarray]]] = defaultdict(list)
    states: dict[Guide, RowState] = {}
    apply_guides = sampler_module.apply_guides

    def recorded(logits: torch.Tensor, guides: list[Guide | None]) -> None:
        live = [(i, g) for i, g in enumerate(guides) if g is not None and not g.terminated]
        before = logits.clone()
        apply_guides(logits, guides)
        for i, guide in live:
            steps[guide].append((before[i], torch.isfinite(logits[i]).numpy()))

    monkeypatch.setattr(sampler_module, "apply_guides", recorded)
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=32, block_size=32, max_model_len=128),
                       backend="host", optimizations="accuracy")
    sample = engine.sampler.sample

    def registered(logits, rows, index=None):  # each constrained row's state: its params and its tokens
        states.update((r.guide, r) for r in rows if r.guide is not None)
        return sample(logits, rows, index)

    engine.sampler.sample = registered
    for name, constraint in CONSTRAINTS.items():
        for kind, sampling in SAMPLING.items():
            engine.add_request(f"{name}-{kind}", f"Give me {name}:", SamplingParams(
                max_tokens=MAX_TOKENS, structured_outputs=constraint, **sampling))
    engine.add_request("free", "Once upon a time", SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))
    finished = {}
    try:
        while engine.has_unfinished_requests():
            finished.update((o.request_id, o) for o in engine.step() if o.finished)
    finally:
        engine.close()

    vocab = checkpoint.config.vocab_size
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(checkpoint.tokenizer, vocab_size=vocab))
    assert len(states) == len(CONSTRAINTS) * (len(SAMPLING) + 1)  # (n = 2: two sequences)
    for guide, state in states.items():
        matcher = xgr.GrammarMatcher(compile_as_vllm(compiler, state.params.structured_outputs))
        tokens = state.output_token_ids
        assert len(steps[guide]) == len(tokens)  # one mask per sampled token, none after the grammar ended
        for k, (token, (logits, engine_mask)) in enumerate(zip(tokens, steps[guide])):
            expected = allowed(matcher, vocab)
            assert np.array_equal(engine_mask, expected), (state.params.structured_outputs, k)
            assert expected[token], (state.params.structured_outputs, k, token)
            if state.params.greedy:
                assert token == int(torch.where(torch.from_numpy(expected), logits, -torch.inf).argmax())
            assert matcher.accept_token(token)
        assert matcher.is_terminated(), (state.params.structured_outputs, tokens)
    assert all(o.outputs[0].finish_reason == "stop" for rid, o in finished.items() if rid != "free")
