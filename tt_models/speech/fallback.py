"""Temperature fallback: a window whose text looks wrong is decoded again at the next, higher temperature.

As openai-whisper's ``transcribe`` and HF's ``WhisperForConditionalGeneration.generate`` (``generate_with_fallback``,
``_need_fallback``) decide it: a window's result is redone when its text is too repetitive (``compression_ratio``
above ``compression_ratio_threshold``) or too unlikely (``avg_logprob`` below ``logprob_threshold``), unless it is
silence (``<|nospeech|>`` above ``no_speech_threshold`` and ``avg_logprob`` below ``logprob_threshold``), whose text is
dropped. The last temperature's result is kept whatever it is. Where this deviates from HF:

- ``compression_ratio`` is openai-whisper's, of the window's text (gzip, as ``verbose_json`` reports it): HF takes it
  over the token ids' bytes, a scale on which 2.4 (openai-whisper's default) would hardly ever be exceeded;
- ``avg_logprob`` comes from the engine's raw logprobs (the model's, before the suppression and timestamp rules;
  HF and openai-whisper read them after), so it is a little lower where the rules removed likely tokens;
- ``no_speech_prob`` is unknown (None) for a multilingual checkpoint without ``timestamps``, as it takes a request
  per window (``language.py``): such windows are never taken for silence; the unfinished rest of a window keeps the
  window's (HF scores each seek anew). Without ``logprob_threshold`` a window is silence on ``no_speech_prob``
  alone (openai-whisper's rule; HF's needs both thresholds);
- sampling is openai-whisper's, over the whole distribution (HF's ``generate`` keeps its default ``top_k=50``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tt_models.speech.transcribe import TranscriptionOptions

# openai-whisper's default, and what OpenAI's API does at temperature 0: greedy, then sampling ever hotter.
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
# HF's rule (openai-whisper's is > 0.5): text decoded this hot conditions no later window (``<|startofprev|>``).
HOT_TEMPERATURE = 0.5


def temperatures(temperature: float | Sequence[float]) -> tuple[float, ...]:
    """One temperature, or the temperatures to try in turn; ValueError unless each is a number in [0, 2]."""
    values = (temperature,) if isinstance(temperature, (int, float)) else tuple(temperature)
    if not values or not all(isinstance(t, (int, float)) and math.isfinite(t) and 0 <= t <= 2 for t in values):
        raise ValueError(f"temperature must be a number in [0, 2] or a sequence of them, got {temperature!r}")
    return tuple(float(t) for t in values)


def is_silence(options: TranscriptionOptions, avg_logprob: float, no_speech_prob: float | None) -> bool:
    """Whether a window's result is silence: its text is dropped, and it is not decoded again."""
    if options.no_speech_threshold is None or no_speech_prob is None:
        return False
    return no_speech_prob > options.no_speech_threshold and \
        (options.logprob_threshold is None or avg_logprob < options.logprob_threshold)


def needs_fallback(options: TranscriptionOptions, compression_ratio: float, avg_logprob: float) -> bool:
    """Whether a window's result (not silence) is to be decoded again at the next temperature."""
    repetitive = options.compression_ratio_threshold is not None and \
        compression_ratio > options.compression_ratio_threshold
    unlikely = options.logprob_threshold is not None and avg_logprob < options.logprob_threshold
    return repetitive or unlikely
