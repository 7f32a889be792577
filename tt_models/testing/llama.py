"""Tiny random HF Llama-family causal LMs (Llama, Qwen2, Qwen3, Mistral: the configs ``tt_models.models.llama``
serves), to compare against."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

COMMON = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=320,
              max_position_embeddings=512)

# name -> config: MHA, GQA, Qwen2 q/k/v bias, Qwen3 per-head q/k norms (heads wider than hidden / heads, as Qwen3's
# are), tied embeddings, Llama-3 rope scaling, Mistral sliding window.
TINY_CONFIGS = {
    "llama-mha": lambda: LlamaConfig(**COMMON, num_key_value_heads=4),
    "llama-gqa": lambda: LlamaConfig(**COMMON, num_key_value_heads=2),
    "qwen2-bias": lambda: Qwen2Config(**COMMON, num_key_value_heads=2),
    "qwen3-qk-norm": lambda: Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=64),
    "llama-tied": lambda: LlamaConfig(**COMMON, num_key_value_heads=2, tie_word_embeddings=True),
    "llama3-rope-scaling": lambda: LlamaConfig(
        **COMMON, num_key_value_heads=1, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "mistral-window": lambda: MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=32),
}
# Wide enough to split over a T3K's 8 chips (hidden 256 and ffn 512: whole tiles on each chip; 8 heads) with fewer KV
# heads than chips (replicated on 4 chips each, or 2 of a 1x4 submesh).
TP_CONFIGS = {
    "qwen2-bias-tp": lambda: Qwen2Config(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                         num_attention_heads=8, num_key_value_heads=2, head_dim=32, vocab_size=320,
                                         max_position_embeddings=512),
    "qwen3-qk-norm-tp": lambda: Qwen3Config(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                            num_attention_heads=8, num_key_value_heads=2, head_dim=64, vocab_size=320,
                                            max_position_embeddings=512),
}
# More query heads on one chip than one tile of rows (64 over 8 KV heads, as GPT-OSS-20B's), with Qwen3's per-head
# q/k norms, which decode runs on the heads' rows and shards back.
MANY_HEADS_CONFIGS = {
    "qwen3-64-heads": lambda: Qwen3Config(**COMMON | dict(num_attention_heads=64, num_key_value_heads=8,
                                                          head_dim=32)),
}


def tiny_model(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = (TINY_CONFIGS | TP_CONFIGS | MANY_HEADS_CONFIGS)[name]()
    config.attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config).eval()
    perturb(model)
    return model


def perturb(model: torch.nn.Module) -> None:
    """HF initializes biases to zero and Qwen3's head norms to one: make them count."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.5)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.uniform_(0.5, 1.5)
