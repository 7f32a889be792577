"""Whisper as a vLLM transcription model: vLLM's Whisper processor registered on tt-models' class, and the surface
vLLM's speech-to-text serving calls (``/v1/audio/transcriptions`` and ``/translations``).

vLLM's own Whisper supplies the processor (log-mel ``input_features [n_mels, 3000]`` per request, 1500 encoder
positions), the prompts and the speech-to-text config; what differs here is English-only checkpoints (tiny.en,
base.en, ...), which vLLM 0.25.1 prompts like multilingual ones: they were trained on
``<|startoftranscript|><|notimestamps|>`` alone (as HF's ``generate`` and tt-models' engine prompt them), transcribe
English only, and answer a language detection with ``en``. English-only is openai-whisper's rule: a vocabulary
smaller than the multilingual 51865 tokens. This module imports vLLM: only ``generator_vllm`` imports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from vllm.config import ModelConfig, SpeechToTextConfig
from vllm.config.speech_to_text import SpeechToTextParams
from vllm.inputs import ExplicitEncoderDecoderPrompt, TextPrompt
from vllm.model_executor.models.interfaces import SupportsMultiModal, SupportsTranscription
from vllm.model_executor.models.whisper import (
    ISO639_1_SUPPORTED_LANGS, WhisperDummyInputsBuilder, WhisperForConditionalGeneration, WhisperMultiModalProcessor,
    WhisperProcessingInfo,
)
from vllm.multimodal import MULTIMODAL_REGISTRY

__all__ = ["WhisperTranscription", "register_whisper"]

# tt_models.checkpoints.whisper_generation.MULTILINGUAL_VOCAB_SIZE's rule; that package is this one's peer layer.
MULTILINGUAL_VOCAB = 51865

register_whisper = MULTIMODAL_REGISTRY.register_processor(
    WhisperMultiModalProcessor, info=WhisperProcessingInfo, dummy_inputs=WhisperDummyInputsBuilder)


def is_english_only(vocab_size: int) -> bool:
    return vocab_size < MULTILINGUAL_VOCAB


class WhisperTranscription(SupportsTranscription, SupportsMultiModal):
    """What vLLM's speech-to-text serving asks of a Whisper class (derived from after the generator base)."""

    supports_transcription_only = True
    supports_segment_timestamp = True
    supports_explicit_language_detection = True
    supported_languages = ISO639_1_SUPPORTED_LANGS

    @classmethod
    def validate_language(cls, language: str | None) -> str | None:
        return WhisperForConditionalGeneration.validate_language(language)

    @classmethod
    def get_speech_to_text_config(cls, model_config: ModelConfig, task_type: str) -> SpeechToTextConfig:
        return WhisperForConditionalGeneration.get_speech_to_text_config(model_config, task_type)

    @classmethod
    def get_num_audio_tokens(cls, audio_duration_s: float, stt_config: SpeechToTextConfig,
                             model_config: ModelConfig) -> int | None:
        return WhisperForConditionalGeneration.get_num_audio_tokens(audio_duration_s, stt_config, model_config)

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        return WhisperForConditionalGeneration.get_placeholder_str(modality, i)

    @classmethod
    def get_generation_prompt(cls, stt_params: SpeechToTextParams) -> Any:
        if not is_english_only(stt_params.model_config.hf_config.vocab_size):
            return WhisperForConditionalGeneration.get_generation_prompt(stt_params)
        if stt_params.task_type != "transcribe" or stt_params.language not in (None, "en"):
            raise ValueError(f"this Whisper model is English-only: it cannot take language={stt_params.language!r}, "
                             f"task={stt_params.task_type!r} (only English transcription)")
        previous = f"<|prev|>{stt_params.request_prompt}" if stt_params.request_prompt else ""
        return ExplicitEncoderDecoderPrompt(
            encoder_prompt=TextPrompt(prompt="", multi_modal_data={
                "audio": (stt_params.audio, stt_params.stt_config.sample_rate)}),
            decoder_prompt=TextPrompt(prompt=f"{previous}<|startoftranscript|><|notimestamps|>"))

    @classmethod
    def get_language_token_ids(cls, tokenizer: Any) -> list[int]:
        if is_english_only(len(tokenizer)):
            return [tokenizer.convert_tokens_to_ids("<|en|>")]
        return WhisperForConditionalGeneration.get_language_token_ids(tokenizer)

    @classmethod
    def get_language_detection_prompt(cls, audio: np.ndarray, stt_config: SpeechToTextConfig) -> Any:
        return WhisperForConditionalGeneration.get_language_detection_prompt(audio, stt_config)

    @classmethod
    def parse_language_detection_output(cls, token_ids: list[int], tokenizer: Any) -> str | None:
        return WhisperForConditionalGeneration.parse_language_detection_output(token_ids, tokenizer)
