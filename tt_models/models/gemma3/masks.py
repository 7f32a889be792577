"""Gemma 3's prefill attention with images, as HF builds it from ``token_type_ids`` (transformers 5,
``create_masks_for_vision_model``): each image's tokens attend one another both ways, everything else is causal.

- Global layers: ``causal OR same image``.
- Sliding layers: ``(causal OR same image) AND key > query - sliding_window``.

An image is a maximal run of image tokens (the processor puts ``<start_of_image>`` / ``<end_of_image>`` around
each). TT-NN's SDPA takes either the causal window or an additive mask, so with images in the chunk both patterns
become masks (built here on the host, one per layer type); text-only chunks keep the causal SDPA.
"""

from __future__ import annotations

import torch

MASKED = torch.finfo(torch.bfloat16).min  # exp() of it is 0 in every kernel


def image_blocks(is_image: torch.Tensor) -> torch.Tensor:
    """Each position's image (0, 1, ... in order), -1 for text: HF's ``get_block_sequence_ids_for_mask``."""
    starts = is_image & ~torch.nn.functional.pad(is_image, (1, 0))[:-1]
    return torch.where(is_image, torch.cumsum(starts.long(), 0) - 1, -1)


def prefill_mask(is_image: torch.Tensor, length: int, sliding_window: int | None) -> torch.Tensor:
    """The additive mask ``[1, 1, length, length]`` of a first chunk whose positions ``0 .. len(is_image) - 1``
    hold ``is_image`` (the tile padding past them is text: causal, never seen by real queries)."""
    blocks = image_blocks(torch.nn.functional.pad(is_image, (0, length - len(is_image))))
    q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
    keep = (k <= q) | ((blocks[:, None] == blocks[None, :]) & (blocks[:, None] >= 0))
    if sliding_window is not None:
        keep &= k > q - sliding_window
    mask = torch.zeros(length, length)
    mask[~keep] = MASKED
    return mask[None, None]
