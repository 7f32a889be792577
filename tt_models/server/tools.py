"""Tool calling on chat completions: what a request's ``tools`` and ``tool_choice`` ask of the engine and how its
output becomes ``tool_calls``.

As vLLM 0.25.1 serves them: the tools go to the chat template; ``tool_choice`` defaults to "auto" when there are
tools; "auto" needs ``--enable-auto-tool-choice --tool-call-parser NAME`` and reads the calls out of the output with
that parser; "required" and a named function constrain the output with a JSON schema (vLLM's: an array of
``{"name", "parameters"}`` objects, or the named function's parameters) so that it always parses, and need no flag;
"none" leaves the output as text.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass, replace
from typing import Any, Literal

from tt_models.engine.sampling import SamplingParams
from tt_models.engine.structured_output import StructuredOutputsParams
from tt_models.server.protocol import ChatCompletionRequest, ChatTool, NamedToolChoice
from tt_models.server.tool_parsers import RequiredToolParser, ToolParser, get_tool_parser

_EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSettings:
    """The server's flags, vLLM's names."""

    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None

    def __post_init__(self) -> None:
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise ValueError("--enable-auto-tool-choice requires --tool-call-parser")
        if self.tool_call_parser is not None:
            get_tool_parser(self.tool_call_parser)  # an unknown name fails at start-up, not per request


def tool_settings(args: argparse.Namespace) -> ToolSettings:
    try:
        return ToolSettings(args.enable_auto_tool_choice, args.tool_call_parser)
    except ValueError as error:
        raise SystemExit(str(error)) from None


@dataclass(frozen=True)
class ToolPlan:
    """What one request's tools make of it: ``mode`` is its tool_choice ("named" for a function), ``parser`` reads
    calls from the output (None: the output is text; for "named" the whole output is the arguments)."""

    mode: Literal["none", "auto", "required", "named"]
    tools: list[dict[str, Any]]  # as the chat template takes them
    parser: ToolParser | None = None
    function: str | None = None  # "named": the function
    schema: dict[str, Any] | None = None  # "required", "named": the output's constraint
    parallel: bool = True  # more than one call per output

    def sampling_params(self, body: ChatCompletionRequest) -> SamplingParams:
        """The engine's parameters for the request; raises ValueError for a constraint that conflicts with the
        tools'."""
        if self.mode == "none":
            return body.chat_sampling_params()
        if body.response_format is not None and body.response_format.type != "text":
            raise ValueError(f"response_format {body.response_format.type} conflicts with tools (tool_choice "
                             f"{self.mode!r} may answer with a call): use one or the other")
        if self.schema is None:  # "auto": the tool markers may be special tokens, which the text must keep
            return replace(body.chat_sampling_params(), skip_special_tokens=False)
        # The function's schema is the constraint; the client's structured outputs may only add options.
        options = dict(body.structured_outputs or {})
        if set(options) - {"disable_any_whitespace"} or any(
                getattr(body, name) is not None for name in ("guided_json", "guided_regex", "guided_choice",
                                                             "guided_grammar")):
            raise ValueError(f"tool_choice {self.mode!r} constrains the output to a call: it cannot take another "
                             "structured outputs constraint")
        params = body.model_copy(update={"structured_outputs": None}).chat_sampling_params()
        return replace(params, structured_outputs=StructuredOutputsParams(json=self.schema, **options))


def tool_plan(body: ChatCompletionRequest, settings: ToolSettings) -> ToolPlan | None:
    """The request's plan, None without tools; raises ValueError naming what is wrong with its tools."""
    if body.tools is not None and not body.tools:
        raise ValueError("tools must not be an empty array: give at least one tool or leave the field out")
    if not body.tools:
        if body.tool_choice not in (None, "none"):
            raise ValueError("tool_choice needs tools: when using tool_choice, tools must be set")
        return None
    names = [tool.function.name for tool in body.tools]
    if len(set(names)) != len(names):
        raise ValueError(f"tools: function names must differ, got {names}")
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools]
    choice = body.tool_choice or "auto"
    parallel = body.parallel_tool_calls is not False  # (None: OpenAI's default, true)
    if isinstance(choice, NamedToolChoice):
        return _named(body.tools, choice.function.name, tools)
    if choice == "required":
        return ToolPlan("required", tools, RequiredToolParser(), schema=required_schema(body.tools),
                        parallel=parallel)
    if choice == "auto":
        if not settings.enable_auto_tool_choice or settings.tool_call_parser is None:
            raise ValueError('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        return ToolPlan("auto", tools, get_tool_parser(settings.tool_call_parser), parallel=parallel)
    return ToolPlan("none", tools)


def _named(chat_tools: list[ChatTool], name: str, tools: list[dict[str, Any]]) -> ToolPlan:
    function = next((tool.function for tool in chat_tools if tool.function.name == name), None)
    if function is None:
        raise ValueError(f"tool_choice names the function {name!r}, which is not in tools "
                         f"({', '.join(tool.function.name for tool in chat_tools)})")
    return ToolPlan("named", tools, function=name, schema=function.parameters or _EMPTY_PARAMETERS, parallel=False)


def required_schema(tools: list[ChatTool]) -> dict[str, Any]:
    """vLLM's schema for "required" (``get_json_schema_from_tools``): a non-empty array of ``{"name": one of the
    functions, "parameters": its parameters}``, the parameters' ``$defs`` moved to the root (their ``$ref`` point
    there)."""
    calls, defs = [], {}
    for tool in tools:
        parameters = copy.deepcopy(tool.function.parameters or _EMPTY_PARAMETERS)
        for name, schema in parameters.pop("$defs", {}).items():
            if defs.setdefault(name, schema) != schema:
                raise ValueError(f"tools: the definition {name!r} has different schemas in different tools")
        calls.append({"properties": {"name": {"type": "string", "enum": [tool.function.name]},
                                     "parameters": parameters},
                      "required": ["name", "parameters"]})
    schema = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": calls}}
    return schema | {"$defs": defs} if defs else schema


def finish_reason(plan: ToolPlan, called: bool, reason: str | None) -> str | None:
    """OpenAI's: "tool_calls" when the model called (for "auto" and "required"; a named function's call ends with
    "stop"). A call cut short keeps "length"."""
    return "tool_calls" if called and plan.mode != "named" and reason == "stop" else reason
