"""Tool calling on chat completions with the official openai client: "required" and a named function constrained
to calls that parse, "auto" read by the hermes parser, streamed deltas that assemble to the non-streamed call, a
``tool`` message round trip through the chat template, and bad tool specs refused with a 400 naming the problem.

Real uvicorn servers on a tiny random Llama with SmolLM2's tokenizer and a Qwen2.5-style chat template (the
template of the hermes format): one without the tool flags (and a tiny BART), one with ``--enable-auto-tool-choice
--tool-call-parser hermes``. The random model's outputs are meaningless, but a constrained one is a valid call."""

from __future__ import annotations

import json
import re
import time

import httpx
import jsonschema
import openai
import pytest
from transformers import AutoTokenizer

from tests.engine.test_structured_output import write_tiny_llama
from tests.server.cases import ServerThread
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server import create_app
from tt_models.server.tools import ToolSettings
from tt_models.testing.metrics import metric

pytestmark = pytest.mark.slow
MODEL, BART_MODEL = "tiny", "tiny-bart"
CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
           "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                          "unit": {"enum": ["celsius", "fahrenheit"]}}}
TIME = {"type": "object", "additionalProperties": False, "required": ["zone"],
        "properties": {"zone": {"enum": ["UTC", "CET"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
NAMED = {"type": "function", "function": {"name": "get_time"}}
# A random model's likeliest tokens are often spaces: JSON without them ends within max_tokens (the option of
# vLLM's structured_outputs, which a tool constraint takes).
COMPACT = {"structured_outputs": {"disable_any_whitespace": True}}
# Qwen2.5-Instruct's chat template (tools in the system prompt, <tool_call> in assistant messages, tool results
# as <tool_response> in a user turn), without its default system prompt.
QWEN25_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = write_tiny_llama(tmp_path_factory.mktemp("tiny-llama-tools"))
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = QWEN25_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def _engine(path) -> LLMEngine:
    return LLMEngine.from_model(str(path), EngineConfig(max_num_seqs=4, block_size=32, max_model_len=512),
                                backend="host", optimizations="accuracy")


def _client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def plain(model_dir, bart_dir):
    """The server without tool flags, its tiny Llama's engine and a client."""
    engine = _engine(model_dir)
    with ServerThread(create_app({MODEL: engine, BART_MODEL: _engine(bart_dir)}, close_engines=True)) as server:
        yield server, engine, _client(server)


@pytest.fixture(scope="module")
def auto(model_dir):
    app = create_app({MODEL: _engine(model_dir)}, close_engines=True,
                     tool_settings=ToolSettings(enable_auto_tool_choice=True, tool_call_parser="hermes"))
    with ServerThread(app) as server:
        yield server, _client(server)


def chat(client: openai.OpenAI, messages=CHAT, max_tokens=96, **kwargs):
    return client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens,
                                          **kwargs)


def streamed(client: openai.OpenAI, max_tokens=96, **kwargs):
    """The message the openai client's stream helper assembles from the deltas, its finish reason, and the raw
    tool-call deltas."""
    deltas = []
    with client.chat.completions.stream(model=MODEL, messages=CHAT, temperature=0, max_tokens=max_tokens,
                                        **kwargs) as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices and event.chunk.choices[0].delta.tool_calls:
                deltas.extend(event.chunk.choices[0].delta.tool_calls)
        final = stream.get_final_completion().choices[0]
    return final.message, final.finish_reason, deltas


def calls_of(message) -> list[tuple[str, dict]]:
    """Each call's name and arguments, validated against its tool's parameters."""
    calls = []
    for call in message.tool_calls or []:
        assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        calls.append((call.function.name, arguments))
    return calls


def assert_blocks_free(server: ServerThread) -> None:
    deadline = time.monotonic() + 30
    while metric(text := httpx.get(f"{server.url}/metrics").text, "tt_models:kv_blocks_in_use", model_name=MODEL):
        assert time.monotonic() < deadline, text
        time.sleep(0.2)


def test_required_returns_calls_that_parse_streamed_or_not(plain):
    _, _, client = plain
    response = chat(client, tools=TOOLS, tool_choice="required", extra_body=COMPACT)
    choice = response.choices[0]
    calls = calls_of(choice.message)
    assert calls and choice.finish_reason == "tool_calls" and choice.message.content is None
    message, reason, deltas = streamed(client, tools=TOOLS, tool_choice="required", extra_body=COMPACT)
    assert (calls_of(message), reason) == (calls, "tool_calls")
    assert [d.index for d in deltas if d.id] == list(range(len(calls)))  # each call announced once, in order


def test_named_function_streams_its_arguments(plain):
    _, _, client = plain
    choice = chat(client, tools=TOOLS, tool_choice=NAMED, extra_body=COMPACT).choices[0]
    [(name, arguments)] = calls_of(choice.message)
    assert name == "get_time" and choice.finish_reason == "stop"  # OpenAI's reason for a named function
    message, reason, deltas = streamed(client, tools=TOOLS, tool_choice=NAMED, extra_body=COMPACT)
    assert (calls_of(message), reason) == ([(name, arguments)], "stop")
    first, *rest = deltas
    assert (first.id is not None, first.function.name, first.function.arguments) == (True, "get_time", "")
    assert rest and all(d.id is None and d.function.name is None for d in rest)  # fragments of the arguments


def test_auto_reads_hermes_calls(auto):
    server, client = auto
    # The output forced into the hermes format by a regex (the model picks the city): "none" gives it as text.
    regex = (r'Sure\. <tool_call>\n\{"name": "get_weather", "arguments": \{"city": "[a-z]{1,8}", '
             r'"unit": "(celsius|fahrenheit)"\}\}\n</tool_call>')
    extra = {"guided_regex": regex}
    text = chat(client, tools=TOOLS, tool_choice="none", extra_body=extra).choices[0].message.content
    assert re.fullmatch(regex, text)
    written = json.loads(text[text.index("{"):text.rindex("}") + 1])
    choice = chat(client, tools=TOOLS, extra_body=extra).choices[0]  # tool_choice defaults to "auto" with tools
    assert choice.message.content == text[:text.index("<tool_call>")]
    assert calls_of(choice.message) == [(written["name"], written["arguments"])]
    assert choice.finish_reason == "tool_calls"
    message, reason, _ = streamed(client, tools=TOOLS, extra_body=extra)
    assert (message.content, calls_of(message), reason) == (choice.message.content, calls_of(choice.message),
                                                            "tool_calls")
    # Without a call, "auto" answers text.
    plain_text = chat(client, tools=TOOLS, max_tokens=8).choices[0]
    assert plain_text.message.tool_calls in (None, []) and plain_text.finish_reason in ("stop", "length")
    assert_blocks_free(server)


def test_auto_answers_two_calls_in_one_output_streamed_or_not(auto):
    """Both calls of one output reach the client, each with its name and arguments: the parser reads both, and the
    server must send both, in the message and in the stream."""
    _, client = auto
    regex = (r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "[a-z]{1,8}", "unit": "celsius"\}\}\n'
             r'</tool_call>\n<tool_call>\n\{"name": "get_time", "arguments": \{"zone": "(UTC|CET)"\}\}\n</tool_call>')
    forced = dict(tools=TOOLS, extra_body={"guided_regex": regex}, max_tokens=192)  # (96 tokens fit one call)
    text = chat(client, tool_choice="none", **forced).choices[0].message.content
    assert re.fullmatch(regex, text)
    written = [json.loads(call) for call in re.findall(r"<tool_call>\n(.*)\n</tool_call>", text)]
    choice = chat(client, **forced).choices[0]
    assert calls_of(choice.message) == [(call["name"], call["arguments"]) for call in written]
    assert [name for name, _ in calls_of(choice.message)] == ["get_weather", "get_time"]
    assert choice.finish_reason == "tool_calls"
    message, reason, deltas = streamed(client, **forced)
    assert (calls_of(message), reason) == (calls_of(choice.message), "tool_calls")
    assert [d.index for d in deltas if d.id] == [0, 1]


def test_tool_message_round_trip(plain, monkeypatch):
    _, engine, client = plain
    [call] = chat(client, tools=TOOLS, tool_choice=NAMED, extra_body=COMPACT).choices[0].message.tool_calls
    prompts = []
    add_request = engine.add_request
    monkeypatch.setattr(engine, "add_request", lambda request_id, prompt, *args, **kwargs: (
        prompts.append(prompt), add_request(request_id, prompt, *args, **kwargs))[1])
    result = '{"time": "12:00"}'
    messages = CHAT + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                       {"role": "tool", "tool_call_id": call.id, "content": result}]
    answer = chat(client, messages=messages, tools=TOOLS, tool_choice="none", max_tokens=8).choices[0]
    assert isinstance(answer.message.content, str) and not answer.message.tool_calls
    # The prompt is the template's rendering of the whole conversation: the call (its arguments as an object, as
    # HF templates take them) and the tool's result.
    tokenizer = engine.tokenizer
    as_template = CHAT + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                         "arguments": json.loads(call.function.arguments)}}]},
        {"role": "tool", "tool_call_id": call.id, "content": result}]
    rendered = tokenizer.apply_chat_template(as_template, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert f"<tool_response>\n{result}\n</tool_response>" in rendered and call.function.arguments in rendered
    [prompt] = prompts
    assert prompt["prompt_token_ids"] == tokenizer.encode(rendered, add_special_tokens=False)


BAD = [  # (request fields, the problem the 400 names)
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "'nope', which is not in"),
    (dict(tool_choice="required"), "tool_choice needs tools"),
    (dict(tools=TOOLS, tool_choice="required", response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": WEATHER}}), "response_format json_schema"),
    (dict(tools=TOOLS, tool_choice="required", extra_body={"guided_regex": "a"}), "another structured outputs"),
    (dict(tools=[{"type": "function", "function": {"description": "no name"}}]), "tools.0.function.name"),
    (dict(tools=[{"type": "retrieval"}], tool_choice="required"), "tools.0.type"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": "an object"}}]),
     "tools.0.function.parameters"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "foo"}}}],
          tool_choice="required"), "invalid structured outputs JSON schema"),
    (dict(tools=TOOLS), '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'),
    (dict(messages=CHAT + [{"role": "tool", "content": "12:00"}], tools=TOOLS, tool_choice="none"), "tool_call_id"),
    (dict(messages=CHAT + [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_time", "arguments": "{not json"}}]}], tools=TOOLS, tool_choice="none"), "are not JSON"),
    (dict(model=BART_MODEL, tools=TOOLS, tool_choice="required"), f"{BART_MODEL} does not take tools"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_tool_specs_are_400_and_the_next_request_succeeds(plain, stream):
    server, _, client = plain
    for fields, problem in BAD:
        fields = {"model": MODEL, "messages": CHAT, "max_tokens": 4, "stream": stream, **fields}
        with pytest.raises(openai.BadRequestError, match=re.escape(problem)):
            client.chat.completions.create(**fields)
    assert calls_of(chat(client, tools=TOOLS, tool_choice="required", extra_body=COMPACT).choices[0].message)
    assert_blocks_free(server)
