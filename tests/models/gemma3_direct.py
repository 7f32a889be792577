"""Greedy tokens of Gemma 3 image chats from the TT class driven directly (no engine): HF's processor of the
checkpoint makes the prompt and the images' pixels, then one request at a time a ``prefill_forward`` and
``decode_forward`` steps in a batch padded to ``max_batch_size``, as TT vLLM's runner calls them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers import AutoConfig

from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration


def chat_inputs(processor: Any, messages: list[dict[str, Any]],
                images: list[Image.Image]) -> tuple[list[int], list[torch.Tensor]]:
    """Prompt tokens (placeholders expanded) and each image's ``[1, 3, H, W]`` pixels; ``messages`` hold
    ``{"type": "image"}`` parts in the images' order. The template writes ``<bos>``, so the tokenizer adds none (as
    ``apply_chat_template(tokenize=True)`` does)."""
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    out = processor(text=[text], images=images or None, return_tensors="pt", add_special_tokens=False)
    return out["input_ids"][0].tolist(), list(out["pixel_values"].split(1)) if images else []


Request = tuple[list[int], list[torch.Tensor]]  # chat_inputs' result


def greedy_direct(model_dir: Path, device: Any, requests: list[Request], *, max_tokens: int, max_batch_size: int,
                  block_size: int, max_model_len: int) -> list[list[int]]:
    """``requests``: ``chat_inputs`` results. The default precision profile, as the plugin builds the class."""
    model = Gemma3ForConditionalGeneration.initialize_vllm_model(
        AutoConfig.from_pretrained(model_dir), device, max_batch_size, max_seq_len=max_model_len)
    width = max_model_len // block_size
    n_kv_heads, head_dim = model.models[0].kv_geometry
    kv = model.allocate_kv_cache((width, n_kv_heads, block_size, head_dim), None, model.models[0].n_layers)
    pages = torch.zeros(max_batch_size, width, dtype=torch.int32)
    pages[0] = torch.arange(width)
    out = []
    for tokens, pixel_values in requests:
        logits = model.prefill_forward(tokens=torch.tensor([tokens]), page_table=pages[:1], kv_cache=kv,
                                       prompt_lens=[len(tokens)], start_pos=[0], pixel_values=[pixel_values or None],
                                       empty_slots=[0])
        sequence = [int(logits[0, -1].argmax())]
        while len(sequence) < max_tokens:
            step, positions = torch.zeros(max_batch_size, dtype=torch.int64), torch.full((max_batch_size,), -1)
            step[0], positions[0] = sequence[-1], len(tokens) + len(sequence) - 1
            logits = model.decode_forward(tokens=step, start_pos=positions, page_table=pages, kv_cache=kv)
            sequence.append(int(logits[0, -1].argmax()))
        out.append(sequence)
    return out
