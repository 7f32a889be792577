"""HF's pipeline word timestamps, the reference of ``tests/speech/test_word_timestamps.py``, and how two word lists
compare.

The reference is ``transformers.pipeline("automatic-speech-recognition", return_timestamps="word")`` over HF's
float32 ``WhisperForConditionalGeneration`` with the very weights and generation config (alignment heads included)
the engine loads. The pipeline decodes with beam search (5 beams) by default; the engine decodes greedily, so the
reference does too (``num_beams=1``). Audio longer than 30 s goes to HF's long-form ``generate`` (sequential seek
on timestamp tokens, each window's token times offset by its seek), as the pipeline does without
``chunk_length_s``. ``hf_window_words`` runs it on each of tt-models' windows instead: the same stretches of audio
decoded, so the same text, and the times tt-models' should have across window boundaries.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from transformers import Pipeline, pipeline

from tt_models.speech import Window
from tt_models.testing.hf_whisper import hf_model

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class TimedWord:
    text: str  # as the tokenizer merges it: leading space and punctuation included
    start: float
    end: float


@functools.cache
def hf_pipeline(model_name: str) -> Pipeline:
    """The ASR pipeline over HF's float32 model of ``model_name``, built once per model (its ``model`` is the
    reference of the cross-attention tests too)."""
    model, checkpoint = hf_model(model_name)
    return pipeline("automatic-speech-recognition", model=model, tokenizer=checkpoint.tokenizer,
                    feature_extractor=checkpoint.processor.feature_extractor)


def hf_pipeline_words(model_name: str, waveforms: list[np.ndarray],
                      languages: list[str | None] | None = None) -> list[list[TimedWord]]:
    """HF's pipeline word timestamps of each waveform (16 kHz), greedy, in ``languages`` (None: English-only
    checkpoints' default)."""
    asr = hf_pipeline(model_name)
    results = []
    for waveform, language in zip(waveforms, languages or [None] * len(waveforms)):
        kwargs = {"num_beams": 1, **({"language": language} if language else {})}
        out = asr(waveform.copy(), return_timestamps="word", generate_kwargs=kwargs)
        results.append([TimedWord(c["text"], *c["timestamp"]) for c in out["chunks"]])
    return results


@dataclass(frozen=True)
class Comparison:
    """Words paired by :func:`spelling` (difflib's longest matching blocks), each pair's larger deviation of start
    and end."""

    deviations: np.ndarray
    unmatched: list[tuple[list[str], list[str]]]  # the stretches that differ: (ours, HF's)
    pairs: list[tuple[TimedWord, TimedWord]]

    @property
    def matched_fraction(self) -> float:
        total = len(self.pairs) + max(sum(len(a) for a, _ in self.unmatched), sum(len(b) for _, b in self.unmatched))
        return len(self.pairs) / total

    def within(self, seconds: float) -> float:
        return float(np.mean(self.deviations <= seconds + 1e-6))

    def summary(self) -> str:
        return (f"{len(self.pairs)} words paired ({self.matched_fraction:.3f}), median deviation "
                f"{np.median(self.deviations):.3f} s, worst {self.deviations.max():.3f} s, within 0.1 s "
                f"{self.within(0.1):.3f}; differing: {self.unmatched}")


def spelling(text: str) -> str:
    """A word as compared: its letters, digits and apostrophes, lowercased. The punctuation the tokenizer merges into
    a word is a decoded token of its own ("Hello?" or "Hello."), which bfloat16 against float32, or AVX2 against
    AVX-512 kernels, may decode otherwise where the two are near a tie: the word and its times are the same."""
    return re.sub(r"[^\w']", "", text.lower())


def compare(ours: list[TimedWord], hf: list[TimedWord]) -> Comparison:
    matcher = difflib.SequenceMatcher(a=[spelling(w.text) for w in ours], b=[spelling(w.text) for w in hf],
                                      autojunk=False)
    pairs, unmatched = [], []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            pairs += list(zip(ours[a0:a1], hf[b0:b1]))
        else:
            unmatched.append(([w.text for w in ours[a0:a1]], [w.text for w in hf[b0:b1]]))
    deviations = np.array([max(abs(a.start - b.start), abs(a.end - b.end)) for a, b in pairs])
    return Comparison(deviations, unmatched, pairs)


def hf_window_words(model_name: str, waveform: np.ndarray, windows: Sequence[Window]) -> list[TimedWord]:
    """HF's pipeline words of each of ``windows`` of the waveform (the stretches tt-models decoded, each one
    request), their times offset by the window's start: what tt-models' words of the whole waveform should be."""
    words: list[TimedWord] = []
    for window, found in zip(windows, hf_pipeline_words(model_name, [waveform[w.start:w.end] for w in windows])):
        offset = window.start / SAMPLE_RATE
        words += [TimedWord(w.text, round(w.start + offset, 2), round(w.end + offset, 2)) for w in found]
    return words
