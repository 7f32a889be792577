"""Audio for the speech models: decoding and resampling, a real speech sample with its transcript, and WER."""

from tt_models.audio.io import load_audio
from tt_models.audio.sample import SpeechSegment, parse_stm, speech_sample, speech_sample_paths
from tt_models.audio.wer import english_spelling_mapping, normalize_english, word_error_rate

__all__ = [
    "SpeechSegment",
    "english_spelling_mapping",
    "load_audio",
    "normalize_english",
    "parse_stm",
    "speech_sample",
    "speech_sample_paths",
    "word_error_rate",
]
