"""Speech logic between the server routes and the engine: what a speech request needs beyond one engine request.

Spoken-language detection for multilingual Whisper checkpoints (``language``), and long-form transcription
(``transcribe``): audio of any length cut into windows at low-energy points (``windows``), run as batches of engine
requests (a window whose text fails openai-whisper's thresholds again, at a higher temperature: ``fallback``),
decoded with timestamp tokens into timed segments when asked (``timestamps``), with each word's times from the
alignment heads' cross-attention when asked (``word_timestamps``), and stitched; ``tt_models.LLM``
is the engine's offline class with ``transcribe`` (``llm``). It builds engine requests and reads their outputs; it
calls down into the engine and never the other way.
"""

from tt_models.speech.language import DetectedLanguage, LanguageDetector, detect_language
from tt_models.speech.transcribe import (EngineBatch, LongFormTranscription, Segment, Transcript,
                                         TranscriptionOptions, run_transcriptions)
from tt_models.speech.windows import Window, split_windows
from tt_models.speech.word_timestamps import Word

__all__ = ["DetectedLanguage", "EngineBatch", "LanguageDetector", "LongFormTranscription", "Segment", "Transcript",
           "TranscriptionOptions", "Window", "Word", "detect_language", "run_transcriptions", "split_windows"]
