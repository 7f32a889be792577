"""The long-form tests' own HF references, beside the shared ones (``tt_models.testing.hf_whisper``): HF's
short-form decoding with timestamps of a clip of one window, and HF's fallback figures of one decoded window."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration
from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

from tt_models.testing.hf_whisper import hf_model
from tt_models.testing.long_recording import SAMPLE_RATE


@dataclass(frozen=True)
class HFTimestamps:
    tokens: list[int]  # generated tokens, timestamps included, without eos
    segments: list[tuple[float, float, str]]  # (start, end, text)
    top5: list[list[int]]  # HF's five most likely tokens at each step (raw logits)


def hf_timestamps(model_name: str, waveforms: list[np.ndarray]) -> list[HFTimestamps]:
    """HF float32 ``generate(return_timestamps=True)`` on each audio of one window (at most 30 s) alone, greedy,
    with the processor's own features (the audio padded with silence to 30 s); each step's top 5 from a forward
    pass over the generated tokens."""
    model, checkpoint = hf_model(model_name)
    config = checkpoint.generation_config
    language = "en" if config.is_multilingual else None
    prompt = [config.decoder_start_token_id]
    if language is not None:
        prompt += [config.lang_to_id[f"<|{language}|>"], config.task_to_id["transcribe"]]
    results = []
    for waveform in waveforms:
        features = checkpoint.processor(waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
        with torch.inference_mode():
            out = model.generate(features, return_timestamps=True, return_segments=True, language=language)
            tokens = [t for t in out["sequences"][0].tolist() if t != config.eos_token_id]  # generated (no prompt)
            logits = model(input_features=features, decoder_input_ids=torch.tensor([prompt + tokens])).logits[0]
        top5 = logits[len(prompt) - 1:].topk(5, dim=-1).indices.tolist()
        segments = [(float(s["start"]), float(s["end"]),
                     checkpoint.tokenizer.decode(s["tokens"], skip_special_tokens=True)) for s in out["segments"][0]]
        results.append(HFTimestamps(tokens, segments, top5))
    return results


@dataclass(frozen=True)
class HFWindowScores:
    avg_logprob: float  # HF's ``_retrieve_avg_logprobs`` over the raw logits (the engine's logprobs are raw)
    no_speech_prob: float  # <|nospeech|> after <|startoftranscript|>, raw logits (HF's WhisperNoSpeechDetection)
    token_bytes_ratio: float  # HF's ``_retrieve_compression_ratio`` (of the token ids' bytes: not the engine's)
    text_ratio: float  # openai-whisper's (gzip of the text), the engine's definition, on HF's decoding of the tokens


def hf_window_scores(model: WhisperForConditionalGeneration, checkpoint, prompt_ids: list[int], tokens: list[int],
                     audio: np.ndarray) -> HFWindowScores:
    """HF's fallback figures of one decoded window, teacher-forced: HF float32 logits over ``prompt_ids`` and the
    window's generated ``tokens`` (eos included) on the window's own features, through HF's helpers."""
    features = checkpoint.processor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
    with torch.inference_mode():
        logits = model(input_features=features, decoder_input_ids=torch.tensor([prompt_ids + tokens[:-1]])).logits[0]
    steps = logits[len(prompt_ids) - 1:]  # step i scores tokens[i]
    avg_logprob = WhisperGenerationMixin._retrieve_avg_logprobs(list(steps), torch.tensor(tokens), 0.0)
    no_speech = steps[0].float().softmax(-1)[checkpoint.generation_config.no_timestamps_token_id - 1]
    text = checkpoint.tokenizer.decode(tokens, skip_special_tokens=True).encode()
    ratio = WhisperGenerationMixin._retrieve_compression_ratio(torch.tensor(tokens), model.config.vocab_size)
    return HFWindowScores(float(avg_logprob), float(no_speech), ratio, len(text) / len(zlib.compress(text)))
