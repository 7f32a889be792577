"""Speech logic between the server routes and the engine: what a speech request needs beyond one engine request.

Today: spoken-language detection for multilingual Whisper checkpoints (``language``). It builds engine requests
and reads their outputs; it calls down into the engine and never the other way.
"""

from tt_models.speech.language import DetectedLanguage, LanguageDetector, detect_language

__all__ = ["DetectedLanguage", "LanguageDetector", "detect_language"]
