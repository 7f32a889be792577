"""Transcript segments as SubRip (``srt``) and WebVTT (``vtt``) subtitles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Cue(NamedTuple):
    start: float  # seconds
    end: float
    text: str


def _timestamp(seconds: float, decimal_marker: str) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal_marker}{millis:03d}"


def srt(cues: Sequence[Cue]) -> str:
    """Numbered cues, ``HH:MM:SS,mmm`` times, a blank line after each."""
    return "".join(f"{i}\n{_timestamp(c.start, ',')} --> {_timestamp(c.end, ',')}\n{c.text.strip()}\n\n"
                   for i, c in enumerate(cues, start=1))


def vtt(cues: Sequence[Cue]) -> str:
    """The ``WEBVTT`` header, then cues with ``HH:MM:SS.mmm`` times."""
    return "WEBVTT\n\n" + "".join(f"{_timestamp(c.start, '.')} --> {_timestamp(c.end, '.')}\n{c.text.strip()}\n\n"
                                   for c in cues)
