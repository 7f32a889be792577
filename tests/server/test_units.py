"""The server's pure parts: subtitles, stream deltas held back for stop strings, validation messages, the CLI."""

from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError

from tt_models.engine.outputs import CompletionOutput
from tt_models.engine.sampling import SamplingParams
from tt_models.server import cli
from tt_models.server.errors import _validation_message
from tt_models.server.streaming import Deltas
from tt_models.server.subtitles import Cue, srt, vtt


def test_subtitles():
    cues = [Cue(0.0, 2.5, " Hello? "), Cue(3661.0015, 3725.9999, "Bye.")]
    assert srt(cues) == ("1\n00:00:00,000 --> 00:00:02,500\nHello?\n\n"
                         "2\n01:01:01,002 --> 01:02:06,000\nBye.\n\n")
    assert vtt(cues) == ("WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello?\n\n"
                         "01:01:01.002 --> 01:02:06.000\nBye.\n\n")


def _out(text: str, finish_reason: str | None = None) -> CompletionOutput:
    return CompletionOutput(0, text, [0] * len(text), None, None, finish_reason)


def test_deltas_hold_back_what_could_start_a_stop_string():
    deltas = Deltas(SamplingParams(stop=["STOP", "xy"]))
    sent = []
    # The engine's cumulative texts as a stop string forms; the final one is cut before it. The last
    # len("STOP") - 1 characters wait (vLLM's rule), so nothing of "STOP" is ever sent.
    for text, reason in [("Hel", None), ("Hello S", None), ("Hello ST", None), ("Hello STO", None),
                         ("Hello ", "stop")]:
        advanced = deltas.advance((0, 0), _out(text, reason))
        sent.append(None if advanced is None else advanced[0])
    assert sent == [None, "Hell", "o", " ", ""]
    assert "".join(s for s in sent if s) == "Hello "


def test_deltas_without_stop_strings_send_everything_and_track_tokens():
    deltas = Deltas(SamplingParams())
    assert deltas.advance((0, 0), _out("ab")) == ("ab", 0)
    assert deltas.advance((0, 0), _out("ab")) is None  # a token without text yet (a partial character)
    assert deltas.advance((0, 0), _out("abc", "length")) == ("c", 2)
    assert deltas.advance((1, 0), _out("", "stop")) == ("", 0)  # another request: its own count; a final is sent


def test_validation_messages_name_the_fields():
    error = RequestValidationError([
        {"type": "missing", "loc": ("body", "messages"), "msg": "Field required"},
        {"type": "int_parsing", "loc": ("body", "max_tokens"), "msg": "Input should be a valid integer"}])
    assert _validation_message(error) == ("messages: Field required; max_tokens: Input should be a valid integer",
                                          "messages")
    bad_json = RequestValidationError([{"type": "json_invalid", "loc": ("body", 12), "msg": "JSON decode error",
                                        "ctx": {"error": "Expecting value"}}])
    assert _validation_message(bad_json) == ("The body is not valid JSON: Expecting value (at character 12)", None)


def test_cli_help_and_name_checks(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["serve", "--help"])
    assert done.value.code == 0 and "--max-num-waiting" in capsys.readouterr().out
    args = cli._parser().parse_args(["serve", "a", "b", "--served-model-name", "x"])
    with pytest.raises(SystemExit, match="1 names for 2 models"):
        cli.build_engines(args)
