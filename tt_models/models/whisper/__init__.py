"""Whisper (HF ``WhisperForConditionalGeneration``): speech recognition and translation."""
