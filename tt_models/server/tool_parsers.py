"""Tool-call parsers: the calls in a model's output, in the format its family's chat template asks for.

The formats and semantics of vLLM 0.25.1's ``--tool-call-parser`` of the same names (``vllm/tool_parsers``):

- ``hermes`` (Qwen2.5, Hermes): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one or more;
- ``llama3_json`` (Llama 3.x): ``{"name": ..., "parameters": {...}}`` (or ``"arguments"``) at the start of the
  output or after ``<|python_tag|>``, several separated by ``;``;
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, or newer tokenizers'
  ``[TOOL_CALLS]name{...}`` per call.

A parser says where the calls begin (the text before them is the message's content) and which calls are
complete. Calls that do not parse are left out; an output with none is all content (as vLLM answers one whose
calls fail to parse). The server reads the same calls from a stream as from the whole output
(``tt_models.server.tool_stream``).
"""

from __future__ import annotations

import argparse
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON text


class ToolParser(ABC):
    marker: str  # the text that begins the calls

    def start(self, text: str) -> int | None:
        """Where the calls begin in ``text``, or None while none has begun."""
        index = text.find(self.marker)
        return None if index < 0 else index

    def pending(self, text: str) -> int:
        """How many characters at the end of ``text`` could still be the beginning of the calls."""
        return next((n for n in range(min(len(self.marker) - 1, len(text)), 0, -1)
                     if self.marker.startswith(text[-n:])), 0)

    @abstractmethod
    def calls(self, region: str, final: bool) -> list[ParsedCall]:
        """The calls in ``region`` (the text from :meth:`start` on) that parse; the last, while it may still be
        growing (``final`` false), only once it is complete."""


def _call(value: Any, arguments_keys: tuple[str, ...]) -> ParsedCall | None:
    """``{"name": str, <an arguments key>: {...}}`` as a call (arguments absent: ``{}``), else None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = next((value[key] for key in arguments_keys if key in value), {})
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def json_values(text: str, pos: int, separators: str) -> Iterator[Any]:
    """The JSON values one after another from ``pos``, with any of ``separators`` between them; stops at the first
    that does not decode (a value still being written never does: its closing bracket is missing)."""
    decoder = json.JSONDecoder()
    while True:
        while pos < len(text) and text[pos] in separators:
            pos += 1
        if pos == len(text):
            return
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return
        yield value


def array_calls(text: str, arguments_keys: tuple[str, ...]) -> list[ParsedCall]:
    """The calls in a JSON array of call objects, item by item (so that complete items count before the array
    closes)."""
    stripped = text.lstrip()
    if not stripped.startswith("["):
        return []
    items = json_values(stripped, 1, " \t\r\n,")
    return [call for call in (_call(item, arguments_keys) for item in items) if call is not None]


class HermesToolParser(ToolParser):
    marker = "<tool_call>"
    end = "</tool_call>"

    def calls(self, region: str, final: bool) -> list[ParsedCall]:
        pieces = region.split(self.marker)[1:]
        calls = []
        for i, piece in enumerate(pieces):
            closed = self.end in piece
            if not (closed or final or i < len(pieces) - 1):
                break  # being written
            try:
                call = _call(json.loads(piece.split(self.end)[0]), ("arguments",))
            except json.JSONDecodeError:
                continue
            if call is not None:
                calls.append(call)
        return calls


class Llama3JsonToolParser(ToolParser):
    marker = "<|python_tag|>"

    def start(self, text: str) -> int | None:
        stripped = text.lstrip()
        if stripped.startswith("{"):
            return len(text) - len(stripped)
        return super().start(text)

    def calls(self, region: str, final: bool) -> list[ParsedCall]:
        region = region.removeprefix(self.marker)
        values = json_values(region, 0, " \t\r\n;")
        return [call for call in (_call(value, ("arguments", "parameters")) for value in values) if call is not None]


class MistralToolParser(ToolParser):
    marker = "[TOOL_CALLS]"

    def calls(self, region: str, final: bool) -> list[ParsedCall]:
        pieces = region.split(self.marker)[1:]
        if pieces and pieces[0].lstrip().startswith("["):  # tokenizers before v11: one array
            return array_calls(pieces[0], ("arguments",))
        calls = []
        for piece in pieces:  # v11 on: name{arguments} after each marker
            brace = piece.find("{")
            if brace < 0:
                continue
            arguments = next(json_values(piece, brace, ""), None)
            call = _call({"name": piece[:brace].replace("[ARGS]", "").strip(), "arguments": arguments},
                         ("arguments",))
            if call is not None and call.name:
                calls.append(call)
        return calls


class RequiredToolParser(ToolParser):
    """Not a model's format: the JSON array ``[{"name": ..., "parameters": {...}}, ...]`` that ``tool_choice:
    "required"`` constrains the output to (vLLM's schema); it is the whole output."""

    marker = ""

    def start(self, text: str) -> int | None:
        return 0

    def calls(self, region: str, final: bool) -> list[ParsedCall]:
        return array_calls(region, ("parameters",))


TOOL_PARSERS: dict[str, type[ToolParser]] = {"hermes": HermesToolParser, "llama3_json": Llama3JsonToolParser,
                                             "mistral": MistralToolParser}


def get_tool_parser(name: str) -> ToolParser:
    if name not in TOOL_PARSERS:
        raise ValueError(f"unknown tool call parser {name!r}; known: {', '.join(TOOL_PARSERS)}")
    return TOOL_PARSERS[name]()


def add_tool_flags(parser: argparse.ArgumentParser) -> None:
    """``tt-models serve``'s flags that pick a parser for tool_choice "auto"."""
    parser.add_argument("--enable-auto-tool-choice", action="store_true",
                        help='tool_choice "auto" (the default with tools): the model may call tools, read from its '
                             "output by --tool-call-parser")
    parser.add_argument("--tool-call-parser", choices=sorted(TOOL_PARSERS),
                        help="the format of the model's tool calls: hermes (Qwen2.5), llama3_json (Llama 3.x), "
                             "mistral")
