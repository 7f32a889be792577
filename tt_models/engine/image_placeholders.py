"""A prompt's image placeholders expanded to the image tokens whose rows the model's vision tower fills, as vLLM's
(and HF's) processors expand them, with each image's pixels for the generator's ``prefill_forward``.

- Qwen2.5-VL and Qwen3-VL: each ``<|image_pad|>`` becomes the image's ``t * h * w / merge**2`` ``<|image_pad|>`` tokens; an image
  is its flat patches ``[t * h * w, C * T * p * p]`` and its ``image_grid_thw`` ``(t, h, w)``.
- Gemma 3: each ``<start_of_image>`` becomes ``\\n\\n<start_of_image>`` + ``mm_tokens_per_image`` ``<image_soft_token>``
  + ``<end_of_image>\\n\\n`` (HF's ``full_image_sequence``; with pan-and-scan crops HF's sentence around one such
  sequence per crop), then newline tokens left side by side are merged as the tokenizer would have written them
  (vLLM's token-level replacement); an image is its ``[1 + crops, C, H, W]`` pixels.
- Mistral 3: each ``[IMG]`` becomes a row of ``[IMG]`` per merged token followed by ``[IMG_BREAK]``, for each row of
  the processed image, the last ``[IMG_BREAK]`` being ``[IMG_END]`` (HF's ``PixtralProcessor``); an image is its
  ``[C, h, w]`` pixels at its own size (HF's batch cropped to its ``image_sizes``, as vLLM's processor hands them).
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image
from transformers import PretrainedConfig, PreTrainedTokenizerBase

PromptImages = dict[str, list[torch.Tensor]]


def placeholder_id(hf_config: PretrainedConfig) -> int:
    """The token a prompt holds once per image (the chat template writes it)."""
    return hf_config.boi_token_id if hf_config.model_type == "gemma3" else hf_config.image_token_id


def expand(hf_config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase | None, image_processor: Any,
           token_ids: list[int], images: list[Image.Image]) -> tuple[list[int], PromptImages]:
    """``token_ids`` with one placeholder per image expanded, and the images' ``prefill_forward`` arguments."""
    if hf_config.model_type == "gemma3":  # RGB: Gemma3Processor's default, which its image processor alone lacks
        return _gemma3(hf_config, tokenizer, token_ids,
                       image_processor(images=images, return_tensors="pt", do_convert_rgb=True))
    if hf_config.model_type == "mistral3":
        # PixtralProcessor's size alignment: whole merged tokens (patch_size * spatial_merge_size pixels).
        side = hf_config.vision_config.patch_size * hf_config.spatial_merge_size
        return _mistral3(hf_config, tokenizer, token_ids, side, image_processor(
            images=images, return_tensors="pt", patch_size={"height": side, "width": side}))
    return _qwen2_5_vl(hf_config, token_ids, image_processor(images=images, return_tensors="pt"))


def _qwen2_5_vl(hf_config: PretrainedConfig, token_ids: list[int], out: Any) -> tuple[list[int], PromptImages]:
    grids = list(out["image_grid_thw"])
    merge = hf_config.vision_config.spatial_merge_size ** 2
    counts = iter(int(grid.prod()) // merge for grid in grids)
    token_ids = [t for token in token_ids
                 for t in ([token] * next(counts) if token == hf_config.image_token_id else [token])]
    return token_ids, {"pixel_values": list(out["pixel_values"].split([int(g.prod()) for g in grids])),
                       "image_grid_thw": grids}


def _gemma3(hf_config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase | None, token_ids: list[int],
            out: Any) -> tuple[list[int], PromptImages]:
    if tokenizer is None:
        raise ValueError("gemma3 needs the checkpoint's tokenizer to take images")
    crops = [int(c) for c in out.get("num_crops", [0] * len(out["pixel_values"]))]
    full = (f"\n\n{tokenizer.boi_token}{tokenizer.image_token * hf_config.mm_tokens_per_image}"
            f"{tokenizer.eoi_token}\n\n")
    replacements = iter(tokenizer.encode(
        full if not n else f"Here is the original image {full} and here are some crops to help you see better "
        + " ".join([full] * n), add_special_tokens=False) for n in crops)
    token_ids = [t for token in token_ids
                 for t in (next(replacements) if token == hf_config.boi_token_id else [token])]
    return _merged_newlines(tokenizer, token_ids), {"pixel_values": list(out["pixel_values"].split(
        [1 + n for n in crops]))}


def _mistral3(hf_config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase | None, token_ids: list[int],
              side: int, out: Any) -> tuple[list[int], PromptImages]:
    if tokenizer is None:
        raise ValueError("mistral3 needs the checkpoint's tokenizer to take images")
    image, image_break, image_end = hf_config.image_token_id, *tokenizer.convert_tokens_to_ids(["[IMG_BREAK]",
                                                                                                "[IMG_END]"])
    pixel_values = [p[:, :h, :w] for p, (h, w) in zip(out["pixel_values"], out["image_sizes"].tolist())]

    def layout(pixels: torch.Tensor) -> list[int]:
        rows, cols = pixels.shape[-2] // side, pixels.shape[-1] // side
        return (([image] * cols + [image_break]) * rows)[:-1] + [image_end]

    replacements = iter(layout(p) for p in pixel_values)
    token_ids = [t for token in token_ids for t in (next(replacements) if token == image else [token])]
    return token_ids, {"pixel_values": pixel_values}


def _merged_newlines(tokenizer: PreTrainedTokenizerBase, token_ids: list[int]) -> list[int]:
    """vLLM's Gemma 3 rule: ``\\n`` + ``\\n\\n`` and ``\\n\\n`` + ``\\n`` -> ``\\n\\n\\n``, then ``\\n\\n`` + ``\\n\\n``
    -> ``\\n\\n\\n\\n`` (single tokens in Gemma's vocabulary, which the tokenizer writes for those runs)."""
    vocab = tokenizer.get_vocab()
    one, two, three, four = (vocab.get("\n" * n) for n in range(1, 5))
    for pair, merged in (((one, two), three), ((two, one), three), ((two, two), four)):
        if merged is None or None in pair:
            continue
        out: list[int] = []
        for token in token_ids:
            if out and (out[-1], token) == pair:
                out[-1] = merged
            else:
                out.append(token)
        token_ids = out
    return token_ids
