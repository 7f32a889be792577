"""HF transformers' own Whisper, float32, on the weights and generation config the engine loads, and its long-form
``generate`` (sequential seek on timestamp tokens): the reference transcripts of a long recording
(``tt_models.testing.long_recording``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.testing.long_recording import SAMPLE_RATE


@dataclass(frozen=True)
class HFLongForm:
    text: str
    segments: list[tuple[float, float, str]]  # (start, end, text)


def hf_model(model_name: str):
    """HF's float32 Whisper with the weights and generation config the engine loads, and the checkpoint."""
    checkpoint = load_hf_checkpoint(model_name)
    model = WhisperForConditionalGeneration(checkpoint.config).eval()
    model.load_state_dict(checkpoint.state_dict, strict=True)
    model.generation_config = checkpoint.generation_config
    return model, checkpoint


def hf_long_form(model_name: str, waveforms: list[np.ndarray], **options: object) -> list[HFLongForm]:
    """HF float32 long-form ``generate`` with timestamps (sequential seek), greedy, on the engine's weights;
    ``options`` go to ``generate`` (``condition_on_prev_tokens=True``).

    As HF documents long-form: features of the whole audio (``truncation=False, padding="longest"``); HF pads a
    last stretch shorter than 30 s with zeros in feature space (not with silent audio, as a short clip's features
    are), so on audio of one window this is not HF's short-form decoding (``hf_timestamps``)."""
    model, checkpoint = hf_model(model_name)
    inputs = checkpoint.processor(waveforms, sampling_rate=SAMPLE_RATE, return_tensors="pt", truncation=False,
                                  padding="longest", return_attention_mask=True)
    with torch.inference_mode():
        out = model.generate(**inputs, return_timestamps=True, return_segments=True, language="en"
                             if checkpoint.generation_config.is_multilingual else None, **options)
    tokenizer = checkpoint.tokenizer
    results = []
    for i in range(len(waveforms)):
        text = tokenizer.decode(out["sequences"][i], skip_special_tokens=True).strip()
        segments = [(float(s["start"]), float(s["end"]), tokenizer.decode(s["tokens"], skip_special_tokens=True))
                    for s in out["segments"][i]]
        results.append(HFLongForm(text, segments))
    return results
