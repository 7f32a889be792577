"""An output's content and tool calls, whole or as the deltas of a stream.

Both read the text the same way (:func:`read`), so the deltas of a stream assemble to the whole output's message:
content is sent until the calls begin (text that could still begin them is held back, as is content of nothing
but whitespace, which a message with calls leaves out); each call is sent once complete, in one delta with its id,
type, name and arguments, except a named function's, whose arguments are the output itself: its first delta (sent
before any output, ``advance("", False)``) has arguments "" and each later one adds what the output added.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tt_models.server.protocol import DeltaFunctionCall, DeltaToolCall, FunctionCall, ToolCall
from tt_models.server.tool_parsers import ParsedCall
from tt_models.server.tools import ToolPlan


@dataclass(frozen=True)
class Reading:
    content_end: int  # text[:content_end] is content
    calls: list[ParsedCall]


def read(plan: ToolPlan, text: str, final: bool) -> Reading:
    """What ``text`` holds so far (``final``: all of the output)."""
    if plan.mode == "named":
        return Reading(0, [ParsedCall(plan.function, text)])
    if plan.parser is None:
        return Reading(len(text), [])
    start = plan.parser.start(text)
    if start is None:
        return Reading(len(text) if final else len(text) - plan.parser.pending(text), [])
    calls = plan.parser.calls(text[start:], final)
    if final and not calls:  # nothing parsed: it was all text
        return Reading(len(text), [])
    return Reading(start, calls if plan.parallel else calls[:1])


def _call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def tool_message(plan: ToolPlan, text: str) -> tuple[str | None, list[ToolCall]]:
    """The content and tool calls of a whole output."""
    reading = read(plan, text, final=True)
    content = text[:reading.content_end]
    calls = [ToolCall(id=_call_id(), function=FunctionCall(name=c.name, arguments=c.arguments))
             for c in reading.calls]
    return (None if calls and not content.strip() else content), calls


class ToolCallDeltas:
    """What one streamed sequence has not sent yet."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.text = ""
        self.content_sent = 0
        self.arguments_sent: list[int] = []  # per call announced: characters of its arguments sent

    @property
    def called(self) -> bool:
        return bool(self.arguments_sent)

    def advance(self, new_text: str, final: bool) -> tuple[str | None, list[DeltaToolCall]]:
        """The content and call deltas to send after ``new_text``."""
        self.text += new_text
        reading = read(self.plan, self.text, final)
        content = None
        end = reading.content_end
        if end > self.content_sent and (self.text[:end].strip() or (final and not reading.calls)):
            content, self.content_sent = self.text[self.content_sent:end], end
        deltas = []
        for index, call in enumerate(reading.calls):
            if index == len(self.arguments_sent):
                deltas.append(DeltaToolCall(index=index, id=_call_id(), type="function",
                                            function=DeltaFunctionCall(name=call.name, arguments=call.arguments)))
                self.arguments_sent.append(len(call.arguments))
            elif len(call.arguments) > self.arguments_sent[index]:
                deltas.append(DeltaToolCall(index=index, function=DeltaFunctionCall(
                    arguments=call.arguments[self.arguments_sent[index]:])))
                self.arguments_sent[index] = len(call.arguments)
        return content, deltas
