"""Greedy tokens of image chats from the classes of TT vLLM's V1 image path (Qwen2.5-VL, Gemma 3, ...) driven directly (no
engine): HF's processor of the checkpoint makes the prompt and the images' inputs, then one request at a time a
``prefill_forward`` and ``decode_forward`` steps in a batch padded to ``max_batch_size``, as TT vLLM's runner calls
them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers import AutoConfig

from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration

CLASSES = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "gemma3": Gemma3ForConditionalGeneration}

# chat_inputs' result: the prompt tokens and the prefill's per-row image arguments (none for a text-only chat).
Request = tuple[list[int], dict[str, list[torch.Tensor]]]


def chat_inputs(processor: Any, messages: list[dict[str, Any]], images: list[Image.Image]) -> Request:
    """Prompt tokens (placeholders expanded) and the images as the plugin hands them over: Qwen2.5-VL's flat patches
    with their grids, Gemma 3's ``[1, 3, H, W]`` pixels, Mistral 3's ``[3, h, w]`` at each image's own size;
    ``messages`` hold ``{"type": "image"}`` parts in the images' order. The templates write any ``<bos>`` (Gemma's),
    so the tokenizer adds none (as ``apply_chat_template(tokenize=True)`` does)."""
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    out = processor(text=[text], images=images or None, return_tensors="pt", add_special_tokens=False)
    tokens = out["input_ids"][0].tolist()
    if not images:
        return tokens, {}
    if "image_sizes" in out:  # Mistral 3's batch padded to its largest image: each cropped back, as vLLM hands them
        return tokens, {"pixel_values": [p[:, :h, :w] for p, (h, w) in zip(out["pixel_values"],
                                                                            out["image_sizes"].tolist())]}
    if "image_grid_thw" not in out:
        return tokens, {"pixel_values": list(out["pixel_values"].split(1))}
    grids = list(out["image_grid_thw"])
    return tokens, {"pixel_values": list(out["pixel_values"].split([int(g.prod()) for g in grids])),
                    "image_grid_thw": grids}


def greedy_direct(model_dir: Path, device: Any, requests: list[Request], *, max_tokens: int, max_batch_size: int,
                  block_size: int, max_model_len: int) -> list[list[int]]:
    """``requests``: ``chat_inputs`` results. The default precision profile, as the plugin builds the class. An M-RoPE
    model's rope deltas go to the first decode step only (the class keeps them per slot)."""
    config = AutoConfig.from_pretrained(model_dir)
    model = CLASSES[config.model_type].initialize_vllm_model(config, device, max_batch_size, max_seq_len=max_model_len)
    width = max_model_len // block_size
    n_kv_heads, head_dim = model.models[0].kv_geometry
    kv = model.allocate_kv_cache((width, n_kv_heads, block_size, head_dim), None, model.models[0].n_layers)
    pages = torch.zeros(max_batch_size, width, dtype=torch.int32)
    pages[0] = torch.arange(width)
    out = []
    for tokens, images in requests:
        logits = model.prefill_forward(tokens=torch.tensor([tokens]), page_table=pages[:1], kv_cache=kv,
                                       prompt_lens=[len(tokens)], start_pos=[0], empty_slots=[0],
                                       **{name: [values] for name, values in images.items()})
        deltas = None
        if isinstance(logits, tuple):  # M-RoPE: (logits, rope deltas)
            logits, deltas = logits
        sequence = [int(logits[0, -1].argmax())]
        while len(sequence) < max_tokens:
            step, positions = torch.zeros(max_batch_size, dtype=torch.int64), torch.full((max_batch_size,), -1)
            step[0], positions[0] = sequence[-1], len(tokens) + len(sequence) - 1
            first = {"rope_deltas_all_users": deltas} if deltas is not None and len(sequence) == 1 else {}
            logits = model.decode_forward(tokens=step, start_pos=positions, page_table=pages, kv_cache=kv, **first)
            sequence.append(int(logits[0, -1].argmax()))
        out.append(sequence)
    return out
