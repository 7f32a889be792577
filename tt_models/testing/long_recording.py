"""Long recordings of known content for long-form transcription: pieces of real speech (the 30 s call,
pyannote's sample, cut at its STM transcript's segment times) and English sentences spoken by espeak-ng, each
piece well under one window, joined by pauses, with a floor of white noise over all of it (-60 dBFS, seeded) so
that no pause is digital silence.

Every piece's place in the recording is known (the call's pieces from the STM times, the sentences without
espeak's own leading and trailing silence), so a transcript's segment boundaries can be checked against them, and
a window cut must land in a pause. The reference transcripts: ``tt_models.testing.hf_whisper``.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from tt_models.audio import load_audio, speech_sample

SAMPLE_RATE = 16000
SENTENCES = (
    "The weather is lovely today, so we are going for a long walk in the park.",
    "Please send the quarterly report to the finance team before Friday afternoon.",
    "Our train leaves from platform nine at half past seven in the morning.",
    "She bought three green apples and a loaf of fresh bread at the market.",
    "The library closes early on Sundays, so return your books before noon.",
    "My brother plays the guitar in a small band that practices every Tuesday.",
    "We need more chairs for the meeting room because twenty people are coming.",
    "The children built a tall snowman in the garden after breakfast.",
    "Turn left at the bank and walk straight until you see the old church.",
    "The doctor told him to drink more water and to sleep eight hours a night.",
    "Our new kitchen has a large window that looks out over the river.",
    "The museum opens at ten and the tickets are free for students.",
    "He forgot his umbrella at the office and got wet on the way home.",
    "The pilot announced that the flight would land twenty minutes early.",
    "Fresh vegetables from the farm taste much better than frozen ones.",
    "Remember to lock the front door and switch off the lights when you leave.",
    "The bakery on the corner sells warm bread every morning at six.",
    "Please remember to water the plants while we are away on holiday.",
    "The bus was late again, so I walked to work in the rain.",
    "Our neighbours have a friendly dog that barks at the postman.",
    "The concert starts at eight, but the doors open an hour earlier.",
    "I left my keys on the kitchen table next to the coffee cups.",
    "The students finished their science project just before the deadline.",
    "We watched the sunset from the top of the hill last night.",
    "The shop across the street is closed for repairs until next week.",
    "My grandmother makes the best apple pie in the whole village.",
    "The meeting has been moved to Thursday because the manager is away.",
    "Put the milk back in the fridge when you have finished with it.",
    "The farmer sold fresh eggs and honey at the market on Saturday.",
    "Bring a warm jacket with you, because it gets cold in the evening.",
)
# The call's pieces: runs of its STM segments (start of the first, end of the last), each cut where the STM has a
# gap between speakers, 1.5-4.4 s of speech each.
CALL_PIECES = ((6.68, 9.798), (9.838, 14.184), (14.444, 17.769), (17.789, 21.475), (21.935, 23.978),
               (24.058, 28.425), (28.445, 29.987))
# Recordings: call pieces (by index) and sentences (by "s" index) in this order, a pause before each.
LAYOUT = (0, "s0", 1, 2, "s1", 3, 4, "s2", 5, 6, "s3")  # about 55 s, two windows
# About 4 minutes (244 s), nine windows: every sentence once and the call's pieces three times, between them.
LONG_LAYOUT = (0, "s0", 1, "s4", 2, "s1", "s5", 3, 4, "s2", "s6", 5, 6, "s3", "s7",
               "s8", 0, 1, "s9", 2, "s10", 3, "s11", "s12", 4, 5, "s13", "s14", 6, "s15",
               "s16", 0, "s17", 1, "s18", "s19", 2, "s20", 3, "s21", "s22", 4, "s23", 5, "s24", "s25", 6, "s26",
               "s27", "s28", "s29")
PAUSE = 1.5  # seconds of pause before each piece and after the last
SPEECH_FLOOR = 0.01  # espeak's silence is exact zeros; speech is far above this
NOISE_DBFS = -60.0  # a floor of white noise over the whole recording (seeded), so no pause is digital silence


@dataclass(frozen=True)
class Placed:
    start: float  # seconds: where the piece's speech starts and ends in the recording
    end: float
    text: str
    spoken: bool  # an espeak-ng sentence (else a piece of the call)


@dataclass(frozen=True)
class LongRecording:
    waveform: np.ndarray  # float32, 16 kHz
    reference: str  # the pieces' transcripts, in order
    pieces: list[Placed]

    @property
    def duration(self) -> float:
        return self.waveform.size / SAMPLE_RATE

    @property
    def sentences(self) -> list[Placed]:
        return [p for p in self.pieces if p.spoken]

    def in_pause(self, seconds: float) -> bool:
        """Whether ``seconds`` falls between pieces (not inside one)."""
        return not any(p.start < seconds < p.end for p in self.pieces)


def espeak(text: str, path: Path) -> np.ndarray:
    if not shutil.which("espeak-ng"):
        raise RuntimeError("espeak-ng is missing: run scripts/setup.sh (apt-get install -y espeak-ng)")
    subprocess.run(["espeak-ng", "-v", "en", "-w", str(path), text], check=True, capture_output=True)
    speech = load_audio(path.read_bytes(), SAMPLE_RATE)
    loud = np.flatnonzero(np.abs(speech) > SPEECH_FLOOR)
    return speech[loud[0]:loud[-1] + 1]


def long_recording(directory: Path, layout=LAYOUT, pause: float = PAUSE, noise_dbfs: float | None = NOISE_DBFS,
                   ) -> LongRecording:
    """The pieces of ``layout`` with ``pause`` s of pause before each and after the last, white noise at
    ``noise_dbfs`` (RMS; None: none) over all of it. The pieces' places are where their speech starts and ends."""
    call, _, segments = speech_sample(SAMPLE_RATE)
    silence = np.zeros(round(pause * SAMPLE_RATE), dtype=np.float32)
    parts: list[np.ndarray] = []
    placed: list[Placed] = []
    at = 0
    for item in layout:
        if isinstance(item, str):
            text = SENTENCES[int(item[1:])]
            speech = espeak(text, directory / f"sentence{item}.wav")
        else:
            lo, hi = CALL_PIECES[item]
            speech = call[round(lo * SAMPLE_RATE):round(hi * SAMPLE_RATE)]
            text = " ".join(s.text for s in segments if lo - 1e-3 <= s.start and s.end <= hi + 1e-3)
        at += silence.size
        placed.append(Placed(at / SAMPLE_RATE, (at + speech.size) / SAMPLE_RATE, text, isinstance(item, str)))
        parts += [silence, speech]
        at += speech.size
    parts.append(silence)
    waveform = np.concatenate(parts).astype(np.float32)
    if noise_dbfs is not None:
        noise = np.random.default_rng(0).standard_normal(waveform.size) * 10 ** (noise_dbfs / 20)
        waveform = (waveform + noise).astype(np.float32)
    return LongRecording(waveform, " ".join(p.text for p in placed), placed)


def wav_bytes(waveform: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, waveform, SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def through_wav(waveform: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The WAV bytes an upload carries and the samples they decode to, so the engine, HF and the server all see
    the very same samples."""
    wav = wav_bytes(waveform)
    return wav, soundfile.read(io.BytesIO(wav), dtype="float32")[0]


def boundary_offsets(pieces: list[Placed], segments: list[tuple[float, float]]) -> list[tuple[float, float] | None]:
    """For each piece, (start - piece start, end - piece end) of the segments that overlap it most (the earliest
    start and the latest end of them), or None when no segment does. Segments overlapping no piece are not
    counted here (see ``stray_segments``)."""
    spans: list[list[tuple[float, float]]] = [[] for _ in pieces]
    for start, end in segments:
        overlaps = [min(end, p.end) - max(start, p.start) for p in pieces]
        best = int(np.argmax(overlaps))
        if overlaps[best] > 0:
            spans[best].append((start, end))
    return [(min(s for s, _ in span) - p.start, max(e for _, e in span) - p.end) if span else None
            for p, span in zip(pieces, spans)]


def stray_segments(pieces: list[Placed], segments: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The segments that overlap no piece (text placed in a pause)."""
    return [(s, e) for s, e in segments if not any(min(e, p.end) > max(s, p.start) for p in pieces)]
