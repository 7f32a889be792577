"""The generation config's token rules that vLLM has no sampling parameter for, as a vLLM logits processor.

Whisper's ``suppress_tokens`` (never generated: ``" -"``, ``"♪"``, ...) and ``begin_suppress_tokens`` (not the first
generated token: a blank, end of text) are applied by HF's ``generate`` and by tt-models' engine, but not by vLLM
0.25.1 (its GPU Whisper ignores them), so a greedy transcript under vLLM can differ: a segment of the suite's
speech sample comes out " - I'm gonna leave the desert." instead of " I'm going to leave the desert.". The
encoder-decoder runner adds this processor to the plugin's host sampler where the config has rules, and samples
on the host for such models, as tt-models' engine does (device sampling applies no host logits processor).
"""

from __future__ import annotations

import math

import torch
from vllm.config import VllmConfig
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates


def generation_rules(vllm_config: VllmConfig) -> tuple[list[int], list[int]]:
    """``(suppress_tokens, begin_suppress_tokens)`` of the model's generation config (empty where it has none)."""
    config = vllm_config.model_config.try_get_generation_config()
    return list(config.get("suppress_tokens") or ()), list(config.get("begin_suppress_tokens") or ())


class GenerationConfigRules(LogitsProcessor):
    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self.suppress, self.begin_suppress = generation_rules(vllm_config)
        self.outputs: dict[int, list[int]] = {}  # batch row -> its output tokens (vLLM's live list)

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.outputs, batch_update, lambda params, prompt, outputs: outputs)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.suppress:
            logits[:, self.suppress] = -math.inf
        first = [row for row, outputs in self.outputs.items() if not outputs and row < logits.shape[0]]
        if first and self.begin_suppress:
            logits[torch.tensor(first)[:, None], torch.tensor(self.begin_suppress)] = -math.inf
        return logits
