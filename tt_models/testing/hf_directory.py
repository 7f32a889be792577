"""HF directories as ``vllm serve`` and TT's examples take them: a checkpoint tt-models loaded from another format
(GGUF, CTranslate2), or a tiny image+text model with its processor."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file
from transformers import GenerationConfig, PreTrainedModel, ProcessorMixin

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


def write_image_text_directory(path: str | Path, model: PreTrainedModel, processor: ProcessorMixin,
                               generation_config: GenerationConfig) -> Path:
    """``model`` with its processor (transformers 5 writes processor_config.json, the tokenizer and
    chat_template.jinja), its image processor's preprocessor_config.json (the file real checkpoints have) and
    ``generation_config``, to ``path``; returns it."""
    path = Path(path)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    processor.image_processor.save_pretrained(path)
    generation_config.save_pretrained(path)
    return path
