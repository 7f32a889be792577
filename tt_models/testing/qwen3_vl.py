"""Qwen3-VL, tiny: a random HF Qwen3-VL, its image processor (PIL backend, small pixel budget) and HF's own inputs for
it; and an Instruct HF directory of it laid out like the real ``Qwen3-VL-2B-Instruct``, built offline.

Qwen3-VL's processor is Qwen2.5-VL's image processor with 16 px patches (a merged token is 32 px square), mean and
std 0.5, so the tokenizer, the vision token ids and the prompt layout are :mod:`tt_models.testing.qwen2_5_vl`'s. The
directory's chat template is Qwen2.5-VL's (the same vision tokens around each image).
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from transformers import GenerationConfig, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

from tt_models.testing import qwen2_5_vl
from tt_models.testing.hf_directory import write_image_text_directory
from tt_models.testing.qwen2_5_vl import (CHAT_TEMPLATE, IMAGE_TOKEN, TEXT_SPECIALS, VISION_END, VISION_START, VOCAB,
                                          hf_inputs, prompt, tiny_qwen_tokenizer)

__all__ = ["IMAGE_TOKEN", "VISION", "TEXT", "hf_inputs", "image_processor", "processed", "prompt", "tiny_qwen3_vl",
           "tiny_processor", "write_tiny_qwen3_vl_checkpoint"]

# Three blocks; DeepStack taps blocks 0 and 1, whose features are added after text layers 0 and 1. A 6 x 6 learned
# position grid, so every test image's grid is an interpolation of it (none is 6 x 6 patches).
VISION = dict(depth=3, hidden_size=64, num_heads=2, intermediate_size=128, hidden_act="gelu_pytorch_tanh",
              patch_size=16, temporal_patch_size=2, spatial_merge_size=2, in_channels=3, out_hidden_size=64,
              num_position_embeddings=36, deepstack_visual_indexes=[0, 1], initializer_range=64 ** -0.5)
# head_dim 32: 16 rotary frequencies, interleaved over (temporal, height, width) as mrope_section [6, 5, 5] assigns
# them. Weights drawn with std hidden ** -0.5, as the Qwen2.5-VL test model's (each branch O(1) beside the residual).
TEXT = dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_hidden_layers=3,
            intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=1024, rms_norm_eps=1e-6,
            initializer_range=64 ** -0.5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [6, 5, 5],
                             "mrope_interleaved": True})
MERGED = VISION["patch_size"] * VISION["spatial_merge_size"]  # a merged token's side in pixels
# Pixel budget: images come out between 1 x 1 and 6 x 6 merged tokens.
MIN_PIXELS, MAX_PIXELS = MERGED * MERGED, (6 * MERGED) ** 2


def tiny_qwen3_vl(seed: int = 0, *, text: dict | None = None, **vision) -> Qwen3VLForConditionalGeneration:
    """Random weights (biases drawn too: HF initializes them to zero, which would hide them). ``text``, ``vision``:
    overrides of ``TEXT`` and ``VISION``."""
    torch.manual_seed(seed)
    config = Qwen3VLConfig(vision_config=VISION | vision, text_config=TEXT | (text or {}), image_token_id=IMAGE_TOKEN,
                           video_token_id=IMAGE_TOKEN + 1, vision_start_token_id=VISION_START,
                           vision_end_token_id=VISION_END, architectures=["Qwen3VLForConditionalGeneration"])
    config._attn_implementation = "eager"
    model = Qwen3VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.3)
            elif name.endswith("pos_embed.weight"):  # (HF draws them with std 0.02: they would not show)
                param.normal_(0, 1)
    return model


def _sizes() -> dict:
    return dict(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=VISION["patch_size"],
                temporal_patch_size=VISION["temporal_patch_size"], merge_size=VISION["spatial_merge_size"],
                image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


def image_processor() -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(**_sizes())


def processed(images: list[Image.Image]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each image's flat patches ``[t * h * w, 1536]`` and grid ``[3]``, as vLLM's processor hands them per item."""
    return qwen2_5_vl.processed(images, image_processor())


def tiny_processor() -> Qwen3VLProcessor:
    """The real processor files' layout (16 px patches merged 2 x 2, mean and std 0.5) at the tiny pixel budget."""
    sizes = _sizes()
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**sizes), tokenizer=tiny_qwen_tokenizer(),
                            video_processor=Qwen3VLVideoProcessor(**sizes), chat_template=CHAT_TEMPLATE)


def write_tiny_qwen3_vl_checkpoint(path: str | Path, seed: int = 0) -> Path:
    """Write ``tiny_qwen3_vl(seed)`` with its processor, tokenizer and generation config to ``path``; returns it."""
    eos, pad = TEXT_SPECIALS["<|im_end|>"], TEXT_SPECIALS["<|endoftext|>"]
    return write_image_text_directory(path, tiny_qwen3_vl(seed), tiny_processor(),
                                      GenerationConfig(bos_token_id=pad, pad_token_id=pad, eos_token_id=[eos, pad]))
