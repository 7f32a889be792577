"""A long recording of known content for long-form transcription: pieces of real speech (the 30 s call,
pyannote's sample, cut at its STM transcript's segment times) and English sentences spoken by espeak-ng, each
piece well under one window, joined by pauses of digital silence.

Every piece's place in the recording is known (the call's pieces from the STM times, the sentences without
espeak's own leading and trailing silence), so a transcript's segment boundaries can be checked against them, and
a window cut must land in a pause. The reference is HF transformers' own long-form ``generate`` (sequential seek on
timestamp tokens) on the same audio and weights.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration

from tt_models.audio import load_audio, speech_sample
from tt_models.checkpoints import load_hf_checkpoint

SAMPLE_RATE = 16000
SENTENCES = (
    "The weather is lovely today, so we are going for a long walk in the park.",
    "Please send the quarterly report to the finance team before Friday afternoon.",
    "Our train leaves from platform nine at half past seven in the morning.",
    "She bought three green apples and a loaf of fresh bread at the market.",
)
# The call's pieces: runs of its STM segments (start of the first, end of the last), each cut where the STM has a
# gap between speakers, 1.5-4.4 s of speech each.
CALL_PIECES = ((6.68, 9.798), (9.838, 14.184), (14.444, 17.769), (17.789, 21.475), (21.935, 23.978),
               (24.058, 28.425), (28.445, 29.987))
# The recording: call pieces (by index) and sentences (by "s" index) in this order, a pause before each.
LAYOUT = (0, "s0", 1, 2, "s1", 3, 4, "s2", 5, 6, "s3")
PAUSE = 1.5  # seconds of silence before each piece and after the last
SPEECH_FLOOR = 0.01  # espeak's silence is exact zeros; speech is far above this


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
    assert shutil.which("espeak-ng"), "espeak-ng is missing: run scripts/setup.sh (apt-get install -y espeak-ng)"
    subprocess.run(["espeak-ng", "-v", "en", "-w", str(path), text], check=True, capture_output=True)
    speech = load_audio(path.read_bytes(), SAMPLE_RATE)
    loud = np.flatnonzero(np.abs(speech) > SPEECH_FLOOR)
    return speech[loud[0]:loud[-1] + 1]


def long_recording(directory: Path, layout=LAYOUT, pause: float = PAUSE) -> LongRecording:
    """The pieces of ``layout`` with ``pause`` s of silence before each and after the last (about 55 s)."""
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
    return LongRecording(np.concatenate(parts).astype(np.float32), " ".join(p.text for p in placed), placed)


@dataclass(frozen=True)
class HFLongForm:
    text: str
    segments: list[tuple[float, float, str]]  # (start, end, text)


def hf_long_form(model_name: str, waveforms: list[np.ndarray]) -> list[HFLongForm]:
    """HF float32 long-form ``generate`` with timestamps (sequential seek), greedy, on the engine's weights."""
    checkpoint = load_hf_checkpoint(model_name)
    model = WhisperForConditionalGeneration(checkpoint.config).eval()
    model.load_state_dict(checkpoint.state_dict, strict=True)
    model.generation_config = checkpoint.generation_config
    inputs = checkpoint.processor(waveforms, sampling_rate=SAMPLE_RATE, return_tensors="pt", truncation=False,
                                  padding="longest", return_attention_mask=True)
    with torch.inference_mode():
        out = model.generate(**inputs, return_timestamps=True, return_segments=True, language="en"
                             if checkpoint.generation_config.is_multilingual else None)
    tokenizer = checkpoint.tokenizer
    results = []
    for i in range(len(waveforms)):
        text = tokenizer.decode(out["sequences"][i], skip_special_tokens=True).strip()
        segments = [(float(s["start"]), float(s["end"]), tokenizer.decode(s["tokens"], skip_special_tokens=True))
                    for s in out["segments"][i]]
        results.append(HFLongForm(text, segments))
    return results
