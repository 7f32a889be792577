"""Qwen2.5-VL's 3-D (M-RoPE) positions of a prompt, computed on the host as HF's ``get_rope_index`` does for images
(transformers 5, ``mm_token_type_ids`` = the image-token rows).

Text tokens advance all three axes together. An image's merged ``t x h x w`` tokens take temporal, height and
width positions offset by the position where the image starts, and the text after it continues from that offset
plus ``max(h, w)``. So past the last image every token's three positions are equal, and are its index plus the
prompt's *delta* ``max position + 1 - prompt length`` (HF's and vLLM's ``rope_deltas``): decode rotates by the
ordinary 1-D table at ``position + delta``.
"""

from __future__ import annotations

from typing import Sequence

import torch


def image_runs(is_image: torch.Tensor) -> list[tuple[bool, int, int]]:
    """``(is_image, start, end)`` of each maximal run of image or text rows, in order."""
    change = torch.nonzero(is_image[1:] != is_image[:-1]).flatten() + 1
    bounds = [0, *change.tolist(), len(is_image)]
    return [(bool(is_image[a]), a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def mrope_positions(tokens: torch.Tensor, image_grids: Sequence[Sequence[int]], image_token_id: int,
                    spatial_merge_size: int) -> tuple[torch.Tensor, int]:
    """Positions ``[3, len(tokens)]`` (temporal, height, width) and the rope delta of one prompt.

    ``image_grids``: each image's ``(t, h, w)`` patch grid (``image_grid_thw``), in prompt order. Each run of image
    tokens is one image (real prompts put ``<|vision_start|>`` / ``<|vision_end|>`` between images), holding its
    ``t * (h / m) * (w / m)`` merged tokens. ``tokens`` may stop inside or before an image (the prompt up to a
    prefill chunk's end): the last run may be that image's first tokens, and the grids of images past the end go
    unused. Positions depend only on what comes before, so they are the whole prompt's first ``len(tokens)``.
    """
    runs = image_runs(tokens == image_token_id)
    grids = [tuple(int(v) for v in grid) for grid in image_grids]
    image_count = sum(is_image for is_image, _, _ in runs)
    if image_count > len(grids):
        raise ValueError(f"{image_count} runs of image tokens in the prompt but {len(grids)} image grids")
    parts, current, grid_iter = [], 0, iter(grids)
    for is_image, start, end in runs:
        if not is_image:
            parts.append(torch.arange(end - start).expand(3, -1) + current)
            current += end - start
            continue
        t, h, w = next(grid_iter)
        h, w = h // spatial_merge_size, w // spatial_merge_size
        cut = end == len(tokens) and end - start < t * h * w  # the image goes on past the tokens given
        if end - start != t * h * w and not cut:
            raise ValueError(f"an image of grid {(t, h * spatial_merge_size, w * spatial_merge_size)} has {t * h * w} "
                             f"tokens, the prompt holds a run of {end - start}")
        grid = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
        parts.append(torch.stack(grid).reshape(3, -1)[:, : end - start] + current)
        current += max(h, w)  # (HF: the temporal axis does not advance the text after a still image)
    positions = torch.cat(parts, dim=1) if parts else torch.zeros(3, 0, dtype=torch.int64)
    delta = int(positions.max()) + 1 - len(tokens) if len(tokens) else 0
    return positions, delta
