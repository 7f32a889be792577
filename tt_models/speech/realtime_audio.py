"""The input audio of a Realtime session: the formats OpenAI's Realtime API takes, decoded and resampled to Whisper's
16 kHz as they arrive, and the buffer of samples not yet committed.

Formats (``audio.input.format``): ``audio/pcm`` (16-bit little-endian mono PCM, at 24 kHz, the only rate OpenAI
takes), and G.711 ``audio/pcmu`` (mu-law) and ``audio/pcma`` (A-law) at 8 kHz, as telephony sends them. G.711 is
decoded by libsndfile (``soundfile``'s RAW reader), and every format is resampled by ``soxr``'s streaming resampler
(libsoxr "HQ", as ``tt_models.audio.io`` resamples files): chunked, its output is sample for sample the one-shot
resampling of the whole stream, held back only by the filter's delay (about 20 ms).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

SAMPLE_RATE = 16000  # Whisper's
PCM_RATE = 24000
G711_RATE = 8000
G711_SUBTYPES = {"audio/pcmu": "ULAW", "audio/pcma": "ALAW"}


@dataclass(frozen=True)
class AudioFormat:
    """OpenAI's ``{"type": "audio/pcm", "rate": 24000}`` (``audio/pcmu`` and ``audio/pcma`` have no rate field)."""

    type: str = "audio/pcm"
    rate: int = PCM_RATE

    @staticmethod
    def parse(spec: dict) -> AudioFormat:
        """Raises ValueError naming what is not supported."""
        kind = spec.get("type") or "audio/pcm"
        if kind == "audio/pcm":
            rate = spec.get("rate") or PCM_RATE
            if rate != PCM_RATE:
                raise ValueError(f"audio/pcm is taken at {PCM_RATE} Hz only (as OpenAI's), got rate {rate}")
            return AudioFormat(kind, rate)
        if kind in G711_SUBTYPES:
            return AudioFormat(kind, G711_RATE)
        raise ValueError(f"Unsupported audio format {kind!r}: use audio/pcm (24 kHz), audio/pcmu or audio/pcma")

    def describe(self) -> dict:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" else {"type": self.type}

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self.type == "audio/pcm" else 1

    def decode(self, data: bytes) -> np.ndarray:
        """Whole samples of ``data`` as float32 in [-1, 1]."""
        if self.type == "audio/pcm":
            return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
        if not data:
            return np.zeros(0, dtype=np.float32)
        samples, _ = soundfile.read(io.BytesIO(data), dtype="float32", format="RAW", subtype=G711_SUBTYPES[self.type],
                                    samplerate=self.rate, channels=1)
        return samples


class InputAudio:
    """The session's audio at 16 kHz: ``end`` samples have arrived since the session began, those from ``start`` on
    are in the buffer (not committed or cleared yet)."""

    def __init__(self, audio_format: AudioFormat = AudioFormat()) -> None:
        self.format = audio_format
        self._resampler = self._stream(audio_format)
        self._partial = b""  # the first byte of a 16-bit sample split between two appends
        self._samples = np.zeros(0, dtype=np.float32)
        self.start = 0
        self.end = 0

    @staticmethod
    def _stream(audio_format: AudioFormat) -> soxr.ResampleStream:
        return soxr.ResampleStream(audio_format.rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")

    def set_format(self, audio_format: AudioFormat) -> np.ndarray:
        """Later appends are in ``audio_format``; returns the samples the old format's resampler still held."""
        if audio_format == self.format:
            return np.zeros(0, dtype=np.float32)
        held = self._add(self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
        self.format, self._resampler, self._partial = audio_format, self._stream(audio_format), b""
        return held

    def append(self, data: bytes) -> np.ndarray:
        """Add the bytes of an ``input_audio_buffer.append``; returns the new 16 kHz samples."""
        data = self._partial + data
        whole = len(data) - len(data) % self.format.bytes_per_sample
        self._partial = data[whole:]
        return self._add(self._resampler.resample_chunk(self.format.decode(data[:whole])))

    def _add(self, samples: np.ndarray) -> np.ndarray:
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._samples = np.concatenate((self._samples, samples))
        self.end += samples.size
        return samples

    def take(self, start: int, end: int) -> np.ndarray:
        """Samples ``[start, end)`` (within the buffer); the buffer then begins at ``end``."""
        taken = self._samples[start - self.start:end - self.start].copy()
        self.drop(end)
        return taken

    def drop(self, end: int) -> None:
        """Forget the samples before ``end``."""
        self._samples = self._samples[end - self.start:]
        self.start = end
