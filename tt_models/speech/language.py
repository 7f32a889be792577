"""Spoken-language detection for multilingual Whisper checkpoints: one engine request per audio.

As openai-whisper's ``detect_language`` and vLLM 0.25.1's transcription server (``Whisper
.get_language_detection_prompt``) do it: the decoder prompt is ``<|startoftranscript|>`` alone, and one greedy
step restricted to the language tokens (``allowed_token_ids``) picks the language, the argmax of HF's
``detect_language``. The request also asks for the raw logprobs of every language token (``logprob_token_ids``:
vLLM's ``logprobs`` would give the top tokens of the whole vocabulary, and caps them at 20), so the
distribution over languages, a softmax over the language tokens' logits as openai-whisper reports it, comes
back in the same step. The step is the prefill's own output: the encoder runs, the decoder runs one token,
and many such requests batch in the engine like any others.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from tt_models.engine.llm import LLM
from tt_models.engine.outputs import RequestOutput
from tt_models.engine.prompts import TokensPrompt
from tt_models.engine.sampling import SamplingParams


@dataclass(frozen=True)
class DetectedLanguage:
    """The most likely language of an audio (a code such as ``"de"``) and every language's probability, most
    likely first."""

    language: str
    probabilities: dict[str, float]

    @property
    def name(self) -> str:
        """The language's name as OpenAI's ``verbose_json`` reports it, e.g. ``"german"``."""
        return LANGUAGES.get(self.language, self.language)


class LanguageDetector:
    """The detection request of one checkpoint, from its generation config (``lang_to_id``): the prompt for an
    audio, the sampling parameters, and the reading of the request's output."""

    def __init__(self, generation_config: GenerationConfig, *, no_speech: bool = False) -> None:
        if not self.supports(generation_config):
            raise ValueError("This Whisper model is English-only: it has no language tokens to detect a language "
                             "with (its language is English)")
        lang_to_id: dict[str, int] = generation_config.lang_to_id
        self.codes = [token.removeprefix("<|").removesuffix("|>") for token in lang_to_id]
        self.token_ids = list(lang_to_id.values())
        self.start_token_id: int = generation_config.decoder_start_token_id
        # The step after <|startoftranscript|> is also where openai-whisper reads the no-speech probability.
        self.no_speech_token_id: int | None = no_speech_token_id(generation_config) if no_speech else None
        scored = self.token_ids + ([self.no_speech_token_id] if no_speech else [])
        self.params = SamplingParams(temperature=0.0, max_tokens=1, allowed_token_ids=self.token_ids,
                                     logprob_token_ids=scored)

    @staticmethod
    def supports(generation_config: GenerationConfig | None) -> bool:
        """Whether the checkpoint is multilingual (English-only Whisper checkpoints have no language tokens)."""
        return bool(getattr(generation_config, "is_multilingual", False) and
                    getattr(generation_config, "lang_to_id", None))

    def prompt(self, audio: Any) -> TokensPrompt:
        """The request for ``audio``, any audio item the engine takes (``(waveform, rate)``, file bytes, ...)."""
        return {"prompt_token_ids": [self.start_token_id], "multi_modal_data": {"audio": audio}}

    def result(self, output: RequestOutput) -> DetectedLanguage:
        """The language and the distribution from the finished request's one token and its logprobs."""
        seq = output.outputs[0]
        step = seq.logprobs[0]
        logits = torch.tensor([step[t].logprob for t in self.token_ids], dtype=torch.float64)
        probs = logits.softmax(dim=0).tolist()
        ranked = sorted(zip(self.codes, probs), key=lambda item: -item[1])
        return DetectedLanguage(self.codes[self.token_ids.index(seq.token_ids[0])], dict(ranked))

    def no_speech_prob(self, output: RequestOutput) -> float:
        """The probability of ``<|nospeech|>`` right after ``<|startoftranscript|>`` (over the whole vocabulary, as
        openai-whisper computes it); needs ``no_speech=True``."""
        assert self.no_speech_token_id is not None, "LanguageDetector(no_speech=True) scores <|nospeech|>"
        return math.exp(output.outputs[0].logprobs[0][self.no_speech_token_id].logprob)


def no_speech_token_id(generation_config: GenerationConfig) -> int:
    """``<|nospeech|>`` (``<|nocaptions|>`` in older vocabularies): the token before ``<|notimestamps|>``, as HF's
    ``WhisperNoSpeechDetection`` takes it."""
    return generation_config.no_timestamps_token_id - 1


def detect_language(llm: LLM, audios: Sequence[Any], *, use_tqdm: bool = False) -> list[DetectedLanguage]:
    """The language of each audio, detected by ``llm`` (a multilingual Whisper) in one batch of requests."""
    detector = LanguageDetector(llm.llm_engine.checkpoint.generation_config)
    outputs = llm.generate([detector.prompt(audio) for audio in audios], detector.params, use_tqdm=use_tqdm)
    return [detector.result(output) for output in outputs]
