"""A tiny random HF Gemma 3 (SigLIP tower, projector, sliding and global layers), its image processor (PIL backend,
64 px) and HF's own inputs for it."""

from __future__ import annotations

import torch
from PIL import Image
from transformers import Gemma3Config, Gemma3ForConditionalGeneration
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

VOCAB = 512
IMAGE_TOKEN, START_OF_IMAGE, END_OF_IMAGE = 500, 498, 499
SLIDING_WINDOW = 32
# 64 px images of 8 px patches: 8 x 8 patches pooled 2 x 2 into 16 tokens per image.
VISION = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=64,
              patch_size=8, layer_norm_eps=1e-6)
TOKENS_PER_IMAGE = 16
# SigLIP-so400m's heads are 72 wide, not whole tiles: heads of 48 (padded to 64) stand in for them.
UNTILED_HEADS = dict(hidden_size=96, num_attention_heads=2)
# Sliding and global layers interleaved, each with its own rotary (the global one with linear scaling, as
# gemma-3-4b); query_pre_attn_scalar != head_dim so the scaling counts; the final soft-cap near the logits' own
# scale so that it bends them. Weights drawn with std hidden ** -0.5 (variance-preserving, each branch O(1) beside
# the residual as in a trained checkpoint).
TEXT = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=4,
            intermediate_size=256, vocab_size=VOCAB, max_position_embeddings=1024, rms_norm_eps=1e-6,
            initializer_range=128 ** -0.5, sliding_window=SLIDING_WINDOW, query_pre_attn_scalar=64,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
            final_logit_softcapping=2.0, bos_token_id=2, eos_token_id=1, pad_token_id=0)


def tiny_gemma3(seed: int = 0, *, text: dict | None = None, tokens_per_image: int = TOKENS_PER_IMAGE,
                **vision: int) -> Gemma3ForConditionalGeneration:
    """Random weights everywhere HF starts from constants: Gemma's norms (``1 + w``, w = 0), SigLIP's LayerNorms and
    biases, the projector (zero), so that every one of them shows in the outputs. ``text``, ``vision``: overrides of
    ``TEXT`` and ``VISION``."""
    torch.manual_seed(seed)
    vision = VISION | vision
    config = Gemma3Config(text_config=TEXT | (text or {}), vision_config=vision, mm_tokens_per_image=tokens_per_image,
                          image_token_id=IMAGE_TOKEN, boi_token_id=START_OF_IMAGE, eoi_token_id=END_OF_IMAGE,
                          architectures=["Gemma3ForConditionalGeneration"])
    config._attn_implementation = "eager"
    model = Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.3)
            elif "norm" in name:
                param.add_(torch.randn_like(param) * 0.2)
            elif name.endswith("mm_input_projection_weight"):
                param.normal_(0, vision["hidden_size"] ** -0.5)
    return model


def image_processor(size: int = VISION["image_size"]) -> Gemma3ImageProcessorPil:
    return Gemma3ImageProcessorPil(size={"height": size, "width": size})


def processed(images: list[Image.Image]) -> list[torch.Tensor]:
    """Each image's ``[1, 3, 64, 64]`` pixel values, as vLLM's processor hands them per item (no pan-and-scan)."""
    return list(image_processor()(images=images, return_tensors="pt")["pixel_values"].split(1))


def prompt(text: list[list[int]], images: int) -> list[int]:
    """``text[0] <start_of_image> image 0 <end_of_image> text[1] ...``: each image's expanded placeholders."""
    out = list(text[0])
    for after in text[1: images + 1]:
        out += [START_OF_IMAGE] + [IMAGE_TOKEN] * TOKENS_PER_IMAGE + [END_OF_IMAGE] + list(after)
    return out


def hf_inputs(tokens: list[int], pixel_values: list[torch.Tensor]) -> dict:
    """HF forward/generate inputs for one prompt; ``token_type_ids`` turn on the bidirectional image attention."""
    ids = torch.tensor([tokens])
    inputs = dict(input_ids=ids, token_type_ids=(ids == IMAGE_TOKEN).long())
    if pixel_values:
        inputs["pixel_values"] = torch.cat(pixel_values)
    return inputs
