"""One Realtime API transcription session (OpenAI's ``intent=transcription``): the protocol's state machine, with
no I/O.

The caller hands it the client's events, validated in shape (``session.update``, ``input_audio_buffer.append``,
``.commit``, ``.clear``), and sends the server events it returns, in order (plain dicts, as they go on the wire). Audio
is decoded and resampled to 16 kHz as it arrives (``realtime_audio.py``); with ``server_vad`` turn detection a turn
is committed by itself once ``silence_duration_ms`` of silence follows its speech (``turns.py``), otherwise by the
client's commit. Each committed turn is a :class:`Turn`: its audio as a ``LongFormTranscription`` (greedy, no
temperature fallback and no silence rule, so that its text streams as tokens decode and is final as decoded; a turn
over 30 s is cut into windows as any long audio is), which the caller runs over its engine, reporting the text as it
grows (:meth:`RealtimeSession.transcribing`) and the transcript (:meth:`RealtimeSession.completed`). A bad event
raises :class:`RealtimeError` and leaves the session as it was.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tt_models.engine.inputs import InputProcessor
from tt_models.speech.realtime_audio import SAMPLE_RATE, AudioFormat, InputAudio
from tt_models.speech.transcribe import LongFormTranscription, Transcript, TranscriptionOptions
from tt_models.speech.turns import SpeechStarted, TurnDetection, TurnDetector, TurnEnded

MIN_COMMIT_MS = 100  # OpenAI refuses to commit less


class RealtimeError(Exception):
    """A client event the session refuses: the Realtime ``error`` event's ``code``, ``message`` and ``param``."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


@dataclass
class Turn:
    """A committed stretch of audio and its transcription (``job``), as conversation item ``item_id``."""

    item_id: str
    job: LongFormTranscription
    model: str
    sent: str = ""  # the text its deltas have carried so far


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _event(kind: str, **fields: Any) -> dict:
    return {"type": kind, "event_id": _new_id("event"), **fields}


class RealtimeSession:
    """``models``: the Whisper models a session may transcribe with, by name; ``model`` the one it starts with."""

    def __init__(self, models: Mapping[str, InputProcessor], model: str) -> None:
        if model not in models:
            raise ValueError(f"{model!r} is not one of the session's models {sorted(models)}")
        self.models = models
        self.id = _new_id("sess")
        self.model = model
        self.language: str | None = None
        self.prompt: str | None = None
        self.detection: TurnDetection | None = TurnDetection()
        self.audio = InputAudio()
        self.detector: TurnDetector | None = TurnDetector(self.detection)
        self.item_id = _new_id("item")  # the id of the next committed turn (speech_started names it)
        self.last_item_id: str | None = None
        self._ready: list[Turn] = []  # turns committed by the event being handled

    # ------------------------------------------------------------------------------------------ configuration

    def describe(self) -> dict:
        """The session as ``session.created`` / ``session.updated`` carry it (a transcription session)."""
        detection = None if self.detection is None else {
            "type": "server_vad", "threshold": self.detection.threshold,
            "prefix_padding_ms": self.detection.prefix_padding_ms,
            "silence_duration_ms": self.detection.silence_duration_ms}
        return {"type": "transcription", "object": "realtime.transcription_session", "id": self.id,
                "audio": {"input": {"format": self.audio.format.describe(), "noise_reduction": None,
                                    "transcription": {"model": self.model, "language": self.language,
                                                      "prompt": self.prompt},
                                    "turn_detection": detection}},
                "include": None}

    def created(self) -> list[dict]:
        return [_event("session.created", session=self.describe())]

    def update(self, session: dict) -> list[dict]:
        """A ``session.update``'s ``session`` (the fields the client set); all checked before any is applied."""
        if session.get("type", "transcription") != "transcription":
            raise RealtimeError("invalid_value", f"This server has transcription sessions only, not "
                                f"{session['type']!r} (connect with ?intent=transcription)", "session.type")
        if session.get("include"):
            raise RealtimeError("invalid_value", "include is not supported (no logprobs)", "session.include")
        given = (session.get("audio") or {}).get("input") or {}
        audio_format = self.audio.format
        if given.get("format") is not None:
            try:
                audio_format = AudioFormat.parse(given["format"])
            except ValueError as error:
                raise RealtimeError("invalid_value", str(error), "session.audio.input.format") from None
        if given.get("noise_reduction") is not None:
            raise RealtimeError("invalid_value", "noise_reduction is not supported: set it to null",
                                "session.audio.input.noise_reduction")
        model, language, prompt = self.model, self.language, self.prompt
        if given.get("transcription") is not None:
            transcription = given["transcription"]
            model = transcription.get("model") or model
            if model not in self.models:
                raise RealtimeError("model_not_found", f"The transcription model {model!r} is not served here; "
                                    f"this server's speech models are {sorted(self.models)}",
                                    "session.audio.input.transcription.model")
            language, prompt = transcription.get("language", language), transcription.get("prompt", prompt)
            try:  # a language or task the checkpoint does not take is refused now, not at the first turn
                self.models[model].whisper_prompt_ids(language, "transcribe")
            except ValueError as error:
                raise RealtimeError("invalid_value", str(error), "session.audio.input.transcription.language") \
                    from None
        detection = self.detection
        if "turn_detection" in given:
            detection = self._detection(given["turn_detection"])
        events = []
        self.model, self.language, self.prompt = model, language, prompt
        events += self._fed(self.audio.set_format(audio_format))
        if detection != self.detection:
            self.detection = detection
            # A turn under way is left to the new detector, which starts from the buffer's audio not yet framed.
            self.detector = None if detection is None else TurnDetector(detection, self.audio.end)
        return events + [_event("session.updated", session=self.describe())]

    @staticmethod
    def _detection(spec: dict | None) -> TurnDetection | None:
        if spec is None:
            return None
        if spec.get("type", "server_vad") != "server_vad":
            raise RealtimeError("invalid_value", f"turn_detection {spec['type']!r} is not supported: use server_vad "
                                "or null", "session.audio.input.turn_detection.type")
        given = {key: spec[key] for key in ("threshold", "prefix_padding_ms", "silence_duration_ms")
                 if spec.get(key) is not None}
        try:
            return TurnDetection(**given)
        except ValueError as error:
            raise RealtimeError("invalid_value", str(error), "session.audio.input.turn_detection") from None

    # ------------------------------------------------------------------------------------------ audio buffer

    def append(self, data: bytes) -> tuple[list[dict], list[Turn]]:
        """An ``input_audio_buffer.append``'s audio; returns the events and the turns server VAD committed."""
        samples = self.audio.append(data)
        return self._fed(samples), self._pending()

    def commit(self) -> tuple[list[dict], list[Turn]]:
        """``input_audio_buffer.commit``: the buffer (or the turn under way in it) is a turn."""
        detector = self.detector
        start = detector.turn_start if detector is not None and detector.in_speech else self.audio.start
        end = self.audio.end
        if (end - start) * 1000 < MIN_COMMIT_MS * SAMPLE_RATE:
            raise RealtimeError("input_audio_buffer_commit_empty", f"Error committing input audio buffer: buffer too "
                                f"small. Expected at least {MIN_COMMIT_MS}ms of audio, but buffer only has "
                                f"{(end - start) * 1000 / SAMPLE_RATE:.2f}ms of audio.")
        if detector is not None:
            detector.committed(end)
        events = self._commit(start, end)
        return events, self._pending()

    def clear(self) -> list[dict]:
        """``input_audio_buffer.clear``: the buffer's audio is dropped, a turn under way with it."""
        self.audio.drop(self.audio.end)
        if self.detector is not None:
            self.detector.committed(self.audio.end)
        return [_event("input_audio_buffer.cleared")]

    def _fed(self, samples: np.ndarray) -> list[dict]:
        if self.detector is None:
            return []
        events = []
        for found in self.detector.feed(samples, self.audio.end):
            if isinstance(found, SpeechStarted):
                events.append(_event("input_audio_buffer.speech_started", item_id=self.item_id,
                                     audio_start_ms=_ms(found.audio_start)))
            elif isinstance(found, TurnEnded):
                events.append(_event("input_audio_buffer.speech_stopped", item_id=self.item_id,
                                     audio_end_ms=_ms(found.audio_end)))
                events += self._commit(found.audio_start, found.audio_end)
        if not self.detector.in_speech:  # silence is not kept, but what the next turn's padding may take
            self.audio.drop(max(self.audio.start, self.detector.earliest_start))
        return events

    def _commit(self, start: int, end: int) -> list[dict]:
        item_id, previous = self.item_id, self.last_item_id
        audio = self.audio.take(max(start, self.audio.start), end)
        options = TranscriptionOptions(language=self.language, prompt=self.prompt, temperature=0.0,
                                       no_speech_threshold=None)
        job = LongFormTranscription(self.models[self.model], (audio, SAMPLE_RATE), options)
        self._ready.append(Turn(item_id, job, self.model))
        self.item_id, self.last_item_id = _new_id("item"), item_id
        item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "user", "status": "completed",
                "content": [{"type": "input_audio", "transcript": None}]}
        return [_event("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous),
                _event("conversation.item.added", item=item, previous_item_id=previous),
                _event("conversation.item.done", item=item, previous_item_id=previous)]

    def _pending(self) -> list[Turn]:
        ready, self._ready = self._ready, []
        return ready

    # ------------------------------------------------------------------------------------------ transcription

    def transcribing(self, turn: Turn, text: str) -> list[dict]:
        """The turn's transcript so far (it only grows): a delta with what is new, if anything."""
        if len(text) <= len(turn.sent):
            return []
        delta, turn.sent = text[len(turn.sent):], text
        return [_event("conversation.item.input_audio_transcription.delta", item_id=turn.item_id, content_index=0,
                       delta=delta)]

    def completed(self, turn: Turn, transcript: Transcript, input_tokens: int, output_tokens: int) -> list[dict]:
        """The turn's final transcript: its last delta, if any, and the ``completed`` event."""
        return self.transcribing(turn, transcript.text) + [_event(
            "conversation.item.input_audio_transcription.completed", item_id=turn.item_id, content_index=0,
            transcript=transcript.text,
            usage={"type": "tokens", "input_tokens": input_tokens, "output_tokens": output_tokens,
                   "total_tokens": input_tokens + output_tokens})]

    def failed(self, turn: Turn, error: RealtimeError) -> list[dict]:
        return [_event("conversation.item.input_audio_transcription.failed", item_id=turn.item_id, content_index=0,
                       error={"type": "server_error", "code": error.code, "message": error.message,
                              "param": error.param})]


def error_event(error: RealtimeError, event_id: str | None, kind: str = "invalid_request_error") -> dict:
    """The Realtime ``error`` event for the client event ``event_id`` (None if it had none)."""
    return _event("error", error={"type": kind, "code": error.code, "message": error.message, "param": error.param,
                                  "event_id": event_id})


def _ms(sample: int) -> int:
    return sample * 1000 // SAMPLE_RATE
