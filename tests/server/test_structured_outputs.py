"""Structured outputs through the server with the official openai client: ``response_format`` (json_schema,
json_object) on chat, vLLM's ``structured_outputs`` and older ``guided_*`` extra fields on completions, streamed and
not; ``client.beta.chat.completions.parse`` with a pydantic model as the response format; a bad constraint is a 400
naming the problem. A real uvicorn server on a tiny random Llama with SmolLM2's tokenizer and chat template (its
outputs are random, but constrained to be valid)."""

from __future__ import annotations

import json
import re
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.engine.test_structured_output import CHOICES, REGEX, SCHEMA, write_tiny_llama
from tests.server.cases import ServerThread
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server import create_app

MODEL = "tiny"
pytestmark = pytest.mark.slow
CHAT = [{"role": "user", "content": "Describe a person as JSON."}]
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
# A random model's likeliest tokens are often spaces: JSON without them ends within max_tokens.
COMPACT = {"structured_outputs": {"disable_any_whitespace": True}}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    engine = LLMEngine.from_model(write_tiny_llama(tmp_path_factory.mktemp("tiny-llama")),
                                  EngineConfig(max_num_seqs=4, block_size=32, max_model_len=256), backend="host",
                                  optimizations="accuracy")
    with ServerThread(create_app({MODEL: engine}, close_engines=True)) as server:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, stream: bool, **kwargs) -> tuple[str, str]:
    """The text and finish reason of one greedy chat completion."""
    response = client.chat.completions.create(model=MODEL, messages=CHAT, temperature=0, max_tokens=64, stream=stream,
                                              **kwargs)
    if not stream:
        return response.choices[0].message.content, response.choices[0].finish_reason
    chunks = [chunk.choices[0] for chunk in response if chunk.choices]
    return "".join(c.delta.content or "" for c in chunks), chunks[-1].finish_reason


def test_chat_json_schema_streamed_and_not(client):
    text, reason = chat(client, stream=False, response_format=RESPONSE_FORMAT, extra_body=COMPACT)
    assert reason == "stop"
    jsonschema.validate(json.loads(text), SCHEMA)
    assert chat(client, stream=True, response_format=RESPONSE_FORMAT, extra_body=COMPACT) == (text, reason)


def test_chat_json_object(client):
    text, reason = chat(client, stream=True, response_format={"type": "json_object"})
    assert reason == "stop" and isinstance(json.loads(text), dict)


class Pet(BaseModel):
    kind: Literal["cat", "dog"]
    age: int = Field(ge=0, le=30)


class Person(BaseModel):  # the client sends it as a strict schema: $defs and $ref, enum, bounds, maxItems
    name: str = Field(max_length=8)
    pets: list[Pet] = Field(max_length=2)
    happy: bool


def test_parse_into_a_pydantic_model(client):
    completion = client.beta.chat.completions.parse(model=MODEL, messages=CHAT, response_format=Person,
                                                    temperature=0, max_tokens=128, extra_body=COMPACT)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, Person)
    assert message.parsed == Person.model_validate_json(message.content)
    # The newer name of the same call gets the same (greedy) answer.
    again = client.chat.completions.parse(model=MODEL, messages=CHAT, response_format=Person, temperature=0,
                                          max_tokens=128, extra_body=COMPACT)
    assert again.choices[0].message.parsed == message.parsed


@pytest.mark.parametrize("stream", [False, True])
def test_completions_extra_fields(client, stream):
    def valid_json(text: str) -> bool:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True

    for extra, valid in (({"structured_outputs": {"choice": CHOICES}}, lambda t: t in CHOICES),
                         ({"guided_regex": REGEX}, lambda t: re.fullmatch(REGEX, t)),
                         ({"guided_json": SCHEMA} | COMPACT, valid_json)):
        response = client.completions.create(model=MODEL, prompt="Answer:", temperature=0, max_tokens=64,
                                             stream=stream, extra_body=extra)
        if stream:
            chunks = [chunk.choices[0] for chunk in response]
            text, reason = "".join(c.text for c in chunks), chunks[-1].finish_reason
        else:
            text, reason = response.choices[0].text, response.choices[0].finish_reason
        assert reason == "stop" and valid(text), (extra, text)


@pytest.mark.parametrize("stream", [False, True])
def test_bad_constraints_are_400(client, stream):
    bad_schema = {**RESPONSE_FORMAT, "json_schema": {"name": "x", "schema": {"type": "foo"}}}
    with pytest.raises(openai.BadRequestError, match="invalid structured outputs JSON schema: .*foo"):
        chat(client, stream=stream, response_format=bad_schema)
    with pytest.raises(openai.BadRequestError, match="invalid structured outputs regex"):
        chat(client, stream=stream, extra_body={"guided_regex": "a(b"})
    with pytest.raises(openai.BadRequestError, match="one kind of structured outputs constraint"):
        chat(client, stream=stream, response_format={"type": "json_object"}, extra_body={"guided_regex": "a"})
    with pytest.raises(openai.BadRequestError, match="needs json_schema.schema"):
        chat(client, stream=stream, response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    with pytest.raises(openai.BadRequestError, match="unexpected keyword argument 'structural_tag'"):
        chat(client, stream=stream, extra_body={"structured_outputs": {"structural_tag": "{}"}})
