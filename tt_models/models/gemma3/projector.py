"""Gemma 3's multimodal projector: an image's patch states -> its ``mm_tokens_per_image`` text-width tokens.

HF's ``Gemma3MultiModalProjector``: average pooling of the ``side x side`` patch grid in ``k x k`` squares
(``k = side / sqrt(mm_tokens_per_image)``), Gemma's RMSNorm ``(1 + w)``, and the projection
``mm_input_projection_weight [vision dim, text dim]``. The pooling is one matmul with a constant ``[tokens, patches]``
matrix (``1 / k^2`` where a patch falls in a token's square), built on the host, broadcast over a batch of images.
On a mesh the projection is column-parallel, its output gathered whole on every chip (as Mllama's projector).
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.gemma3.decoder import gemma_norm
from tt_models.runtime import ttnn
from tt_models.tt.linear import Linear
from tt_models.tt.tensor_parallel import gather
from tt_models.tt.weights import as_tensor


def pooling_matrix(patches_per_side: int, tokens: int) -> torch.Tensor:
    """``[tokens, patches]``: row ``t`` averages the patches (row-major) of token ``t``'s square (row-major)."""
    side = int(round(tokens ** 0.5))
    if side * side != tokens or patches_per_side % side:
        raise ValueError(f"mm_tokens_per_image {tokens} must be a square whose side divides {patches_per_side}")
    k = patches_per_side // side
    rows, cols = torch.meshgrid(torch.arange(patches_per_side), torch.arange(patches_per_side), indexing="ij")
    token_of_patch = ((rows // k) * side + cols // k).reshape(-1)
    return torch.nn.functional.one_hot(token_of_patch, tokens).T.float() / (k * k)


class Projector:
    def __init__(self, state: dict[str, torch.Tensor], prefix: str, patches_per_side: int, tokens: int, eps: float,
                 device: Any, weight_dtype: Any) -> None:
        self.pool = as_tensor(pooling_matrix(patches_per_side, tokens)[None, None], device)
        self.norm = gemma_norm(state[f"{prefix}mm_soft_emb_norm.weight"], eps, device, fractured=False)
        self.device = device
        self.projection = Linear(state[f"{prefix}mm_input_projection_weight"].T, device, weight_dtype,
                                 parallel="column")

    def forward(self, patches: Any) -> Any:
        """``[B, 1, patches, vision dim]`` (whole) -> ``[B, 1, tokens, text dim]`` (whole on every chip)."""
        pooled = ttnn.matmul(self.pool, patches)
        normed = self.norm.forward(pooled)
        ttnn.deallocate(pooled)
        projected = self.projection.forward(normed)
        ttnn.deallocate(normed)
        out = gather(projected, self.device)
        if out is not projected:
            ttnn.deallocate(projected)
        return out
