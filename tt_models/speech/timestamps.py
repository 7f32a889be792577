"""Segments from a window's tokens decoded with Whisper's timestamp tokens.

With timestamps, Whisper writes ``<|t0|> text <|t1|><|t1|> text <|t2|>`` ...: each segment's text sits between a
start and an end timestamp (``timestamp_begin`` is ``<|0.00|>``, then one token per 0.02 s), in order. As HF's
``_retrieve_segment`` reads them, the end of one segment may repeat as the next one's start; an output that ends
with a lone timestamp (``<|t|><|endoftext|>``) says the rest of the window has no speech, while any other ending
(a pair of timestamps, or text cut short) leaves the window unfinished from its last timestamp on: HF seeks there
and decodes again, and so does long-form transcription here (``transcribe.py``: a request for the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

TIME_PRECISION = 0.02  # seconds per timestamp token


@dataclass(frozen=True)
class TimedText:
    """A segment: times in seconds of the whole audio, its tokens (timestamps included) and text."""

    start: float
    end: float
    tokens: list[int]
    text: str


@dataclass(frozen=True)
class WindowSegments:
    segments: list[TimedText]
    resume_at: float | None  # seconds into the window where its unfinished part starts (None: finished)
    rest: TimedText | None = None  # the text after the last timestamp, to the window's end (unfinished)


def parse_segments(token_ids: Sequence[int], *, timestamp_begin: int, eos_token_id: int, offset: float,
                   duration: float, decode: Callable[[list[int]], str], final: bool = True) -> WindowSegments:
    """The segments of a window that starts at ``offset`` s and lasts ``duration`` s, from its output tokens.

    Text tokens are those below ``eos_token_id``; other special tokens (eos) are dropped, and so are segments
    without text. The trailing text after the last timestamp is a segment ending at the window's end only for a
    ``final`` output without timestamps at all; a partial output (``final=False``) gives its closed segments."""
    segments: list[TimedText] = []
    start: int | None = None  # the open segment's start timestamp token
    text: list[int] = []
    tokens: list[int] = []
    timestamps = 0
    single_ending = False
    for token in token_ids:
        if token >= timestamp_begin:
            timestamps += 1
            single_ending = bool(text)
            if text:
                begin = 0.0 if start is None else (start - timestamp_begin) * TIME_PRECISION
                end = min((token - timestamp_begin) * TIME_PRECISION, duration)
                segments.append(TimedText(offset + min(begin, end), offset + end, [*tokens, token], decode(text)))
                text, tokens, start = [], [], None
            else:  # a segment's start (the later of a pair)
                start, tokens = token, [token]
        elif token < eos_token_id:
            text.append(token)
            tokens.append(token)
            single_ending = False
    if not final:
        return WindowSegments(segments, None)
    if timestamps == 0:  # no timestamps at all: the text spans the window
        whole = [TimedText(offset, offset + duration, tokens, decode(text))] if text else []
        return WindowSegments(whole, None)
    last = max(t for t in token_ids if t >= timestamp_begin)
    resume_at = None if single_ending else min((last - timestamp_begin) * TIME_PRECISION, duration)
    rest = TimedText(offset + resume_at, offset + duration, tokens, decode(text)) if text and resume_at is not None \
        else None
    return WindowSegments(segments, resume_at, rest)
