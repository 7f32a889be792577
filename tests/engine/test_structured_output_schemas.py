"""JSON-schema outputs on 50 hypothesis-generated schemas and prompts (nested objects, arrays with item bounds,
enums, required and optional properties, bounded integers, numbers and strings, booleans), on the tiny random Llama
over SmolLM2's vocabulary: every output completes (finish reason "stop") and validates with ``jsonschema``, greedy,
sampled and with n = 2, all queued at once; then under preemption by recomputation, chunked prefill, async decode
and 2 data-parallel replicas, where every output is again valid and the same as in the plain run (a constrained
token depends on its row's logits and grammar state only, not on how the batch was formed), and no block stays
taken.

The schemas are drawn once per module by running a ``@given`` function with ``derandomize=True`` (a fixed seed:
every run gets the same 50) that only collects its examples, keeping every 4th distinct one of 250 (hypothesis
explores by mutating an example, so neighbours are near-copies); the engine runs then see them all at once, which
a test body run per example could not do."""

from __future__ import annotations

import json
import string
from typing import Any, NamedTuple

import jsonschema
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.engine.test_structured_output import write_tiny_llama
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams
from tt_models.engine.structured_output import StructuredOutputsParams

pytestmark = pytest.mark.slow
COUNT = 50
MAX_TOKENS = 200  # the longest output the bounds allow is well under this: every output must end at eos
NAMES = ["id", "name", "age", "tags", "score", "ok", "kind", "owner", "items", "size"]
WORDS = ["cat", "dog", "red", "x", "", 'say "hi"', "a b"]

# Bounded leaves: a random model may pick any allowed token, so every value's length is capped by its schema.
integers = st.tuples(st.integers(-50, 50), st.integers(0, 200)).map(
    lambda b: {"type": "integer", "minimum": b[0], "maximum": b[0] + b[1]})
numbers = st.tuples(st.integers(-40, 40), st.integers(1, 80)).map(  # quarter steps: bounds such as -2.25
    lambda b: {"type": "number", "minimum": b[0] / 4, "maximum": (b[0] + b[1]) / 4})
strings = st.tuples(st.integers(0, 2), st.integers(0, 5)).map(
    lambda b: {"type": "string", "minLength": b[0], "maxLength": b[0] + b[1]})
enums = st.lists(st.one_of(st.sampled_from(WORDS), st.integers(-9, 99), st.none(), st.booleans()), min_size=1,
                 max_size=4, unique=True).map(lambda values: {"enum": values})
leaves = st.one_of(integers, numbers, strings, enums, st.just({"type": "boolean"}))


@st.composite
def objects(draw: st.DrawFn, values: st.SearchStrategy[dict]) -> dict:
    properties = draw(st.dictionaries(st.sampled_from(NAMES), values, min_size=1, max_size=3))
    required = draw(st.lists(st.sampled_from(sorted(properties)), unique=True))
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def arrays(items: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    return st.tuples(items, st.integers(0, 2), st.integers(0, 2)).map(
        lambda a: {"type": "array", "items": a[0], "minItems": a[1], "maxItems": a[1] + a[2]})


values = st.recursive(leaves, lambda inner: st.one_of(arrays(inner), objects(inner)), max_leaves=5)
schemas = objects(values)  # a JSON response is an object at the top
prompts = st.text(string.ascii_letters + string.digits + " ,.:?", min_size=1, max_size=60)


def draw_cases() -> list[tuple[dict, str]]:
    """``COUNT`` distinct (schema, prompt) pairs, the same on every run."""
    drawn: dict[str, tuple[dict, str]] = {}

    @settings(max_examples=5 * COUNT, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(schemas, prompts)
    def collect(schema: dict, prompt: str) -> None:
        drawn.setdefault(json.dumps(schema, sort_keys=True), (schema, prompt))

    collect()
    spread = list(drawn.values())[::4]
    assert len(spread) >= COUNT, f"hypothesis drew only {len(drawn)} distinct schemas"
    return spread[:COUNT]


@pytest.fixture(scope="module")
def cases() -> list[tuple[dict, str]]:
    return draw_cases()


def params(i: int, schema: dict) -> SamplingParams:
    """Every third request greedy, sampled (seeded) or n = 2 sampled."""
    constraint = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
    sampling: dict[str, Any] = [{"temperature": 0.0}, {"temperature": 1.0, "seed": i},
                                {"temperature": 0.8, "seed": i, "n": 2}][i % 3]
    return SamplingParams(max_tokens=MAX_TOKENS, structured_outputs=constraint, **sampling)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return load_hf_checkpoint(write_tiny_llama(tmp_path_factory.mktemp("tiny-llama-smollm2-vocab")))


class Run(NamedTuple):
    outputs: dict[int, list]  # case -> its sequences
    preemptions: int
    chunks: list[int]  # each prefill step's token count per sequence
    replicas: set[int]  # the replicas the requests were placed on


def run(checkpoint, cases: list[tuple[dict, str]], **config) -> Run:
    """Every case's outputs, all queued at once, each checked: complete and valid; no block left taken."""
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=32, block_size=32, max_model_len=256, **config),
                       backend="host", optimizations="accuracy")
    chunks: list[int] = []
    schedule = engine.scheduler.schedule

    def recorded():  # the prefill chunks' sizes, to see chunked prefill happen
        out = schedule()
        if out.is_prefill:
            chunks.extend(tokens for _, tokens in out.scheduled)
        return out

    engine.scheduler.schedule = recorded
    replicas = {engine.add_request(str(i), f"Answer in JSON. {prompt}", params(i, schema)).replica
                for i, (schema, prompt) in enumerate(cases)}
    outputs: dict[int, list] = {}
    try:
        while engine.has_unfinished_requests():
            outputs.update((int(o.request_id), o.outputs) for o in engine.step() if o.finished)
    finally:
        engine.close()
    for i, seqs in outputs.items():
        assert len(seqs) == params(i, cases[i][0]).n
        for seq in seqs:
            assert seq.finish_reason == "stop", (cases[i][0], seq.text)
            jsonschema.validate(json.loads(seq.text), cases[i][0])
    assert sorted(outputs) == list(range(len(cases)))
    assert all(kv.num_free_blocks == engine.config.num_kv_blocks for kv in engine.scheduler.kvs)
    return Run(outputs, engine.scheduler.num_preemptions, chunks, replicas)


@pytest.fixture(scope="module")
def plain(checkpoint, cases) -> dict[int, list]:
    return run(checkpoint, cases).outputs


def test_every_output_is_valid(plain):
    texts = [seq.text for seqs in plain.values() for seq in seqs]
    assert len(texts) == COUNT + COUNT // 3  # (every third request has n = 2)
    assert len(set(texts)) > COUNT // 2  # the outputs are not all the same trivial object


CONFIGS = {"preempted": {"num_kv_blocks": 16, "preemption_mode": "recompute"},
           "chunked": {"max_num_batched_tokens": 8},
           "async": {"async_decode": True},
           "replicas": {"data_parallel_size": 2}}


@pytest.mark.parametrize("name", CONFIGS)
def test_outputs_are_unchanged_by_scheduling(checkpoint, cases, plain, name):
    done = run(checkpoint, cases, **CONFIGS[name])
    assert (done.preemptions > 0) == (name == "preempted")
    assert (max(done.chunks) <= 8) == (name == "chunked")  # (a prompt is longer than 8 tokens)
    assert done.replicas == ({0, 1} if name == "replicas" else {0})
    for i in range(COUNT):
        assert [s.token_ids for s in done.outputs[i]] == [s.token_ids for s in plain[i]], (i, cases[i][0])
