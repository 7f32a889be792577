"""A checkpoint tt-models loaded from another format (GGUF, CTranslate2) written as the HF directory ``vllm serve``
and TT's examples take."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from tt_models.checkpoints import Checkpoint


def write_hf_directory(checkpoint: Checkpoint, path: Path, architecture: str, tied: str) -> Path:
    """Config (naming ``architecture``: a GGUF or CTranslate2 config names none, vLLM needs it), generation config,
    processor or else tokenizer, and safetensors weights less ``tied`` (the output projection that shares the
    embedding's storage: safetensors refuses shared tensors, and HF ties it again on load)."""
    path.mkdir(parents=True, exist_ok=True)
    checkpoint.config.architectures = [architecture]
    checkpoint.config.save_pretrained(path)
    if checkpoint.generation_config is not None:
        checkpoint.generation_config.save_pretrained(path)
    (checkpoint.processor or checkpoint.tokenizer).save_pretrained(path)
    state = {k: v.contiguous() for k, v in checkpoint.state_dict.items() if k != tied}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path
