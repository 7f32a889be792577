"""Turns in audio as it arrives: OpenAI's ``server_vad`` turn detection on the energy voice-activity detector of
``vad.py``, applied incrementally.

The audio (16 kHz) is cut in ``vad.py``'s frames, 20 ms every 10 ms from the start of the session, each frame's level
in dBFS computed by :class:`~tt_models.speech.vad.SpeechActivity` once the frame is whole. A frame is voiced when its
level is at least :func:`threshold_db` of ``threshold`` (0.5: -50 dBFS; 0: -80, 1: -20 dBFS: a higher threshold needs
louder audio, as OpenAI's does), and speech is where ``MIN_SPEECH_FRAMES`` (30 ms) voiced frames run in a row, as
``vad.py`` finds it. A turn starts at its first speech (the audio sent to the model begins ``prefix_padding_ms`` before
it, never before the previous turn's end) and ends ``silence_duration_ms`` after the last speech, once that much
silence has arrived. Every decision depends on the samples alone, never on how they were chunked: the same audio gives
the same turns whether it comes in 100 ms chunks at real-time pace or in one burst, and the same turns as the rule
applied to the whole recording at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tt_models.speech.vad import FRAME, HOP, MIN_SPEECH_FRAMES, SpeechActivity

SAMPLE_RATE = 16000
SPEECH_SPAN = (MIN_SPEECH_FRAMES - 1) * HOP + FRAME  # samples a run of MIN_SPEECH_FRAMES voiced frames covers


def threshold_db(threshold: float) -> float:
    """The frame level (dBFS) at or above which a frame is voiced, for OpenAI's ``threshold`` in [0, 1]."""
    return -80.0 + 60.0 * threshold


@dataclass(frozen=True)
class TurnDetection:
    """OpenAI's ``server_vad`` parameters, with its defaults."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        for name in ("prefix_padding_ms", "silence_duration_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class SpeechStarted:
    speech_start: int  # the sample where speech was found
    audio_start: int  # the turn's first sample: prefix padding included


@dataclass(frozen=True)
class TurnEnded:
    audio_start: int  # the turn's samples [audio_start, audio_end), silence after the speech included
    audio_end: int


class TurnDetector:
    """Feed it the session's 16 kHz samples in any chunks; it says where turns start and end (sample indices from
    the start of the session). ``committed`` moves the start of the next turn's audio (a manual commit)."""

    def __init__(self, detection: TurnDetection, position: int = 0) -> None:
        self.detection = detection
        self.threshold_db = threshold_db(detection.threshold)
        self.padding = detection.prefix_padding_ms * SAMPLE_RATE // 1000
        self.silence = detection.silence_duration_ms * SAMPLE_RATE // 1000
        self._frame = -(-position // HOP)  # the next frame whose level is unknown (frames start on HOP multiples)
        self._skip = self._frame * HOP - position  # samples fed before that frame's start
        self._tail = np.zeros(0, dtype=np.float32)  # samples from frame self._frame on
        self._voiced_run = 0  # voiced frames in a row just before self._frame
        self._floor = position  # a turn's audio starts no earlier (the end of the last turn or commit)
        self.turn_start: int | None = None  # the audio start of the turn under way
        self._speech_end = 0  # the end of the last speech of the turn under way

    @property
    def in_speech(self) -> bool:
        return self.turn_start is not None

    @property
    def earliest_start(self) -> int:
        """No turn found later can start its audio before this sample (speech may begin in the frames whose voicing
        is pending)."""
        return max(self._floor, (self._frame - self._voiced_run) * HOP - self.padding)

    def committed(self, position: int) -> None:
        """The audio before ``position`` was committed: no turn is under way, the next starts after it."""
        self.turn_start = None
        self._floor = position

    def feed(self, samples: np.ndarray, end: int) -> list[SpeechStarted | TurnEnded]:
        """``samples`` are the session's samples up to ``end`` (exclusive) not fed before."""
        skipped = min(self._skip, samples.size)
        self._skip -= skipped
        self._tail = np.concatenate((self._tail, samples[skipped:]))
        start = self._frame * HOP
        frames = (end - start - FRAME) // HOP + 1 if end - start >= FRAME else 0
        events: list[SpeechStarted | TurnEnded] = []
        if frames > 0:
            levels = SpeechActivity(self._tail[:(frames - 1) * HOP + FRAME], SAMPLE_RATE).levels[:frames]
            for offset, level in enumerate(levels):
                events += self._frame_level(self._frame + offset, level)
            self._frame += frames
            self._tail = self._tail[frames * HOP:]
        if self.turn_start is not None and self._speech_end > 0:
            # The turn ends once every frame that could still begin speech before its end is known unvoiced.
            stop = self._speech_end + self.silence
            if (self._frame - self._voiced_run) * HOP >= stop:
                events.append(self._end(stop))
        return events

    def _frame_level(self, frame: int, level: float) -> list[SpeechStarted | TurnEnded]:
        events: list[SpeechStarted | TurnEnded] = []
        self._voiced_run = self._voiced_run + 1 if level >= self.threshold_db else 0
        if self._voiced_run < MIN_SPEECH_FRAMES:
            return events
        first = frame - MIN_SPEECH_FRAMES + 1  # the frame that begins this run of speech
        speech_start = first * HOP
        if self.turn_start is not None and self._speech_end > 0 and speech_start >= self._speech_end + self.silence:
            events.append(self._end(self._speech_end + self.silence))
        if self.turn_start is None:
            self.turn_start = max(self._floor, speech_start - self.padding)
            self._speech_end = 0
            events.append(SpeechStarted(speech_start, self.turn_start))
        self._speech_end = speech_start + SPEECH_SPAN
        return events

    def _end(self, stop: int) -> TurnEnded:
        ended = TurnEnded(self.turn_start, stop)
        self.committed(stop)
        return ended
