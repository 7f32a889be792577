"""A real speech sample: the 30 s two-speaker phone call that ships in the ``pyannote.audio`` wheel.

``pyannote/audio/sample/sample.wav`` (16 kHz mono 16-bit, 30.0 s) with its reference transcript
``sample.stm``. The package is installed data-only (``--no-deps``: its runtime needs lightning, torchaudio,
torchcodec, ...) and never imported: the files are found through ``find_spec("pyannote")``, the namespace
package, whose lookup runs no pyannote code.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from tt_models.audio.io import load_audio
from tt_models.package_data import package_files

PACKAGE = "pyannote.audio"
PACKAGE_VERSION = "4.0.7"
SAMPLE_DIR = Path("audio", "sample")
SAMPLE_NAME = "sample"
IGNORED_TRANSCRIPT = "IGNORE_TIME_SEGMENT_IN_SCORING"
GAP_SPEAKER = "inter_segment_gap"


class SpeechSegment(NamedTuple):
    start: float  # seconds
    end: float
    speaker: str
    text: str


def parse_stm(text: str, waveform: str | None = None) -> list[SpeechSegment]:
    """The segments of an STM transcript (NIST sclite's segment time mark format), sorted by start time.

    Each line is ``waveform channel speaker begin end [<label>] transcript``. Following the format:
    blank lines and ``;;`` comments are skipped, the optional ``<...>`` label is dropped, segments marked
    ``IGNORE_TIME_SEGMENT_IN_SCORING`` and ``inter_segment_gap`` speakers are left out (they are not
    scored), whitespace in the transcript is collapsed. The words themselves are kept as written (case and
    punctuation included): scoring normalises them (see ``word_error_rate``). ``waveform`` keeps only that
    recording's lines. Raises ValueError naming the line for a malformed one.
    """
    segments = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(";;"):
            continue
        fields = line.split()
        if len(fields) < 5:
            raise ValueError(f"STM line {number} has {len(fields)} fields, needs at least 5 "
                             f"(waveform channel speaker begin end [<label>] transcript): {line!r}")
        name, _channel, speaker, begin, end, *words = fields
        try:
            start, stop = float(begin), float(end)
        except ValueError:
            raise ValueError(f"STM line {number}: begin/end times {begin!r} {end!r} are not numbers") from None
        if not 0 <= start <= stop:
            raise ValueError(f"STM line {number}: segment {start}..{stop} s is not a time range")
        if words and words[0].startswith("<") and words[0].endswith(">"):
            words = words[1:]
        transcript = " ".join(words)
        if waveform is not None and name != waveform:
            continue
        if speaker.lower() == GAP_SPEAKER or transcript.upper() == IGNORED_TRANSCRIPT:
            continue
        segments.append(SpeechSegment(start, stop, speaker, transcript))
    return sorted(segments, key=lambda s: (s.start, s.end))


def speech_sample_paths() -> tuple[Path, Path]:
    """``(sample.wav, sample.stm)`` inside the installed ``pyannote.audio`` package (not imported)."""
    wav, stm = package_files("The speech sample", PACKAGE, PACKAGE_VERSION, "pyannote",
                             SAMPLE_DIR / f"{SAMPLE_NAME}.wav", SAMPLE_DIR / f"{SAMPLE_NAME}.stm")
    return wav, stm


def speech_sample(sampling_rate: int = 16000) -> tuple[np.ndarray, int, list[SpeechSegment]]:
    """``(audio, sampling_rate, segments)``: the 30 s call as float32 mono, and its reference transcript."""
    wav, stm = speech_sample_paths()
    audio = load_audio(wav, sampling_rate=sampling_rate)
    return audio, sampling_rate, parse_stm(stm.read_text(encoding="utf-8"), waveform=SAMPLE_NAME)
