"""Image embeddings put at (or added to) a prompt's image-token rows, on the device (decoder-only image+text
models)."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.tensor_parallel import fracture
from tt_models.tt.weights import as_tensor, mesh_mapper


def place_image_rows(x: Any, rows: torch.Tensor, image_table: Any, device: Any) -> Any:
    """``x [1, 1, S, dim]`` (fractured over a mesh, as embeddings come out) with row ``i`` replaced by
    ``image_table``'s row ``rows[i]`` wherever ``rows[i] >= 0``; ``image_table [1, 1, tokens, dim]`` whole.

    The image rows are gathered with ``ttnn.embedding`` and selected per row by exact 0/1 masks: multiplying by 0 or
    1 and adding zeros changes no value, so each row is exactly the text or the image embedding. ``x`` is consumed."""
    images = _table_rows(rows, image_table, device)
    is_image = (rows >= 0).float().reshape(1, 1, -1, 1)
    kept = ttnn.multiply(x, as_tensor(1 - is_image, device))
    placed = ttnn.multiply(images, as_tensor(is_image, device))
    out = ttnn.add(kept, placed)
    for t in (images, kept, placed, x):
        ttnn.deallocate(t)
    return out


def add_image_rows(x: Any, rows: torch.Tensor, image_table: Any, device: Any) -> Any:
    """``x`` (as :func:`place_image_rows` takes it) with ``image_table``'s row ``rows[i]`` added to row ``i`` wherever
    ``rows[i] >= 0`` (Qwen3-VL's DeepStack); the other rows get exact zeros added. ``x`` is consumed."""
    images = _table_rows(rows, image_table, device)
    added = ttnn.multiply(images, as_tensor((rows >= 0).float().reshape(1, 1, -1, 1), device))
    out = ttnn.add(x, added)
    for t in (images, added, x):
        ttnn.deallocate(t)
    return out


def _table_rows(rows: torch.Tensor, image_table: Any, device: Any) -> Any:
    """``image_table``'s rows ``rows.clamp(min=0)`` ``[1, 1, len(rows), dim]``, fractured as embeddings are."""
    ids = ttnn.from_torch(rows.clamp(min=0)[None].to(torch.int32), dtype=ttnn.uint32, layout=ttnn.ROW_MAJOR_LAYOUT,
                          device=device, mesh_mapper=mesh_mapper(device))
    table = ttnn.to_layout(image_table, ttnn.ROW_MAJOR_LAYOUT)
    images = ttnn.embedding(ids, table, layout=ttnn.TILE_LAYOUT)
    for t in (ids, table):
        ttnn.deallocate(t)
    return fracture(ttnn.reshape(images, (1, 1, len(rows), images.shape[-1])), device)
