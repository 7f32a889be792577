"""The tool-call parsers and the reading of an output as content and calls, whole and streamed: every prefix of an
output streams deltas that assemble to the whole output's message; the checks of tool requests and of the flags. The outputs are written here in each family's
format (vLLM 0.25.1's parsers' test cases); the expected calls are the JSON objects they were written from."""

from __future__ import annotations

import json

import pytest

from tt_models.server import cli
from tt_models.server.protocol import ChatCompletionRequest
from tt_models.server.tool_parsers import ParsedCall, get_tool_parser
from tt_models.server.tool_stream import ToolCallDeltas, read, tool_message
from tt_models.server.tools import ToolPlan, ToolSettings, required_schema, tool_plan, tool_settings

WEATHER = {"city": "Paris", "unit": "celsius"}
TIME = {"zone": "Europe/Oslo"}
EXPECTED = [ParsedCall("get_weather", json.dumps(WEATHER)), ParsedCall("get_time", json.dumps(TIME))]


def _json(value) -> str:
    return json.dumps(value)


OUTPUTS = {  # parser: (output, the content before the calls, the calls)
    "hermes": (f'Let me check.\n<tool_call>\n{{"name": "get_weather", "arguments": {_json(WEATHER)}}}\n</tool_call>\n'
               f'<tool_call>\n{{"name": "get_time", "arguments": {_json(TIME)}}}\n</tool_call>',
               "Let me check.\n", EXPECTED),
    "llama3_json": (f'<|python_tag|>{{"name": "get_weather", "parameters": {_json(WEATHER)}}}; '
                    f'{{"name": "get_time", "arguments": {_json(TIME)}}}', None, EXPECTED),
    "mistral": (f'[TOOL_CALLS] [{{"name": "get_weather", "arguments": {_json(WEATHER)}}}, '
                f'{{"name": "get_time", "arguments": {_json(TIME)}}}]', None, EXPECTED),
}


def _auto(parser: str) -> ToolPlan:
    return ToolPlan("auto", [], get_tool_parser(parser))


def _stream(plan: ToolPlan, text: str, step: int = 1) -> tuple[str | None, list[tuple[str, str]]]:
    """The content and (name, arguments) the deltas of ``text`` (sent ``step`` characters at a time) assemble to."""
    tracker = ToolCallDeltas(plan)
    content, calls = None, []
    pieces = [text[i:i + step] for i in range(0, len(text), step)] or [""]
    for i, piece in enumerate([""] + pieces):
        sent, deltas = tracker.advance(piece, final=i == len(pieces))
        if sent is not None:
            content = (content or "") + sent
        for delta in deltas:
            if delta.index == len(calls):
                assert delta.id.startswith("chatcmpl-tool-") and delta.type == "function"
                calls.append((delta.function.name, ""))
            name, arguments = calls[delta.index]
            calls[delta.index] = (name, arguments + delta.function.arguments)
    return content, calls


@pytest.mark.parametrize("parser", OUTPUTS)
def test_parsers_read_their_format(parser):
    text, content, expected = OUTPUTS[parser]
    got_content, calls = tool_message(_auto(parser), text)
    assert got_content == content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == \
        [(c.name, json.loads(c.arguments)) for c in expected]


@pytest.mark.parametrize("parser", OUTPUTS)
@pytest.mark.parametrize("step", [1, 7])
def test_streamed_calls_assemble_to_the_whole_outputs(parser, step):
    plan = _auto(parser)
    text = OUTPUTS[parser][0]
    content, calls = tool_message(plan, text)
    assert _stream(plan, text, step) == (content, [(c.function.name, c.function.arguments) for c in calls])


def test_mistral_v11_format():
    text = f'[TOOL_CALLS]get_weather[ARGS]{_json(WEATHER)}[TOOL_CALLS]get_time{_json(TIME)}'
    assert read(_auto("mistral"), text, final=True).calls == EXPECTED


@pytest.mark.parametrize("parser,text", [
    ("hermes", 'Sure: <tool_call>{"name": "f", "arguments": {"a": </tool_call> no JSON'),
    ("hermes", "Plain <tool_ text without a call"),
    ("llama3_json", "The answer is {1, 2}."),
    ("llama3_json", '{"not a call": 1}'),
    ("mistral", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\":"),  # cut short
])
def test_outputs_without_a_call_that_parses_are_all_content(parser, text):
    plan = _auto(parser)
    assert tool_message(plan, text) == (text, [])
    for step in (1, 5):
        assert _stream(plan, text, step) == (text, [])


def test_a_call_still_being_written_waits_until_it_is_complete():
    plan = _auto("hermes")
    text = OUTPUTS["hermes"][0]
    cut = text.index("</tool_call>")
    assert read(plan, text[:cut], final=False).calls == []
    assert read(plan, text[:cut], final=True).calls == EXPECTED[:1]  # an unclosed call at the end counts (vLLM)


def test_parallel_tool_calls_false_keeps_the_first_call():
    plan = ToolPlan("auto", [], get_tool_parser("hermes"), parallel=False)
    assert [c.function.name for c in tool_message(plan, OUTPUTS["hermes"][0])[1]] == ["get_weather"]


def test_named_function_streams_its_arguments_as_they_grow():
    plan = ToolPlan("named", [], function="get_weather", schema={})
    text = _json(WEATHER)
    tracker = ToolCallDeltas(plan)
    _, [first] = tracker.advance("", final=False)
    assert (first.function.name, first.function.arguments) == ("get_weather", "")
    assert _stream(plan, text, 3) == (None, [("get_weather", text)])
    assert tool_message(plan, text)[0] is None


def _request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"$ref": "#/$defs/city"}}, "$defs": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time"}}]


def test_required_schema_is_vllms():
    schema = required_schema(_request(tools=TOOLS).tools)
    assert schema["type"] == "array" and schema["minItems"] == 1
    assert schema["$defs"] == {"city": {"type": "string"}}
    first, second = schema["items"]["anyOf"]
    assert first["properties"]["name"] == {"type": "string", "enum": ["get_weather"]}
    assert "$defs" not in first["properties"]["parameters"] and second["properties"]["parameters"]["type"] == "object"
    assert TOOLS[0]["function"]["parameters"]["$defs"]  # the request's own schema is left as it was


@pytest.mark.parametrize("fields,problem", [
    (dict(tool_choice="required"), "tool_choice needs tools"),
    (dict(tools=[]), "must not be an empty array"),
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "'nope', which is not in"),
    (dict(tools=TOOLS), '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'),
    (dict(tools=TOOLS + TOOLS[:1], tool_choice="required"), "names must differ"),
])
def test_bad_tool_requests(fields, problem):
    with pytest.raises(ValueError, match=problem):
        tool_plan(_request(**fields), ToolSettings())


def test_settings_need_a_parser_for_auto():
    with pytest.raises(ValueError, match="requires --tool-call-parser"):
        ToolSettings(enable_auto_tool_choice=True)
    with pytest.raises(ValueError, match="unknown tool call parser"):
        ToolSettings(tool_call_parser="nope")
    assert tool_plan(_request(tools=TOOLS), ToolSettings(True, "hermes")).mode == "auto"


def test_serve_flags():
    def settings(*flags: str) -> ToolSettings:
        return tool_settings(cli._parser().parse_args(["serve", "m", *flags]))

    assert settings("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json") == ToolSettings(True,
                                                                                                     "llama3_json")
    assert settings() == ToolSettings()
    with pytest.raises(SystemExit, match="--enable-auto-tool-choice requires --tool-call-parser"):
        settings("--enable-auto-tool-choice")
    with pytest.raises(SystemExit):  # argparse: not one of the parsers
        settings("--tool-call-parser", "nope")
