"""``tt_models.LLM``: the engine's offline-inference class with the speech entry points.

Transcription builds on generation (it runs engine requests), so it lives above the engine: this subclass of
:class:`tt_models.engine.llm.LLM` adds ``transcribe`` and is the class ``tt_models`` exports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from tt_models.engine import llm
from tt_models.speech.transcribe import LongFormTranscription, Transcript, TranscriptionOptions, run_transcriptions


class LLM(llm.LLM):
    """A model and its engine, for batch generation (:class:`tt_models.engine.llm.LLM`, whose arguments it takes)
    and transcription."""

    def transcribe(self, audio: Any, *, language: str | None = None,
                   task: Literal["transcribe", "translate"] = "transcribe", timestamps: bool = False,
                   condition_on_previous_text: bool = False, prompt: str | None = None,
                   temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                   compression_ratio_threshold: float | None = 2.4, logprob_threshold: float | None = -1.0,
                   no_speech_threshold: float | None = 0.6, vad: bool = True,
                   word_timestamps: bool = False) -> Transcript:
        """Transcribe (or translate to English) one audio of any length with a Whisper model: ``(waveform, rate)``,
        a 16 kHz waveform or the bytes of an audio file. Long audio is cut into windows of at most 30 s that run
        as one batch of engine requests (``tt_models.speech``); ``timestamps`` gives timed segments, whose times
        ``vad`` moves in to their speech; ``word_timestamps`` gives ``Transcript.words`` (each word's start and end
        from the alignment heads' cross-attention, as HF's pipeline computes them). Without a ``language`` a
        multilingual model detects it. A window whose text fails the thresholds is decoded again at the next of the
        ``temperature`` tuple (openai-whisper's fallback and defaults; one temperature: no fallback). Raises
        ValueError for bad audio, language, task or temperature, and for word timestamps with a checkpoint that has
        no alignment heads."""
        return self.transcribe_batch([audio], language=language, task=task, timestamps=timestamps,
                                     condition_on_previous_text=condition_on_previous_text, prompt=prompt,
                                     temperature=temperature, compression_ratio_threshold=compression_ratio_threshold,
                                     logprob_threshold=logprob_threshold, no_speech_threshold=no_speech_threshold,
                                     vad=vad, word_timestamps=word_timestamps)[0]

    def transcribe_batch(self, audios: Sequence[Any], **options: Any) -> list[Transcript]:
        """:meth:`transcribe` for many audios at once, their windows batched together; every audio is checked
        before any runs (a bad one raises ValueError naming its index)."""
        settings = TranscriptionOptions(**options)
        jobs = []
        for i, audio in enumerate(audios):
            try:
                jobs.append(LongFormTranscription(self.llm_engine.processor, audio, settings))
            except ValueError as e:
                raise ValueError(f"audio {i}: {e}") from e
        return run_transcriptions(self.llm_engine, jobs)
