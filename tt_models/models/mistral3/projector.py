"""Mistral 3's multimodal projector: an image's patch states -> its tokens in the text width.

HF's ``Mistral3MultiModalProjector``: an RMSNorm (the text config's epsilon), the patch merger (each
``merge x merge`` square of patches concatenated and projected back to the vision width by ``merging_layer``), then
``linear_2(gelu(linear_1(x)))``.

HF's merger gathers a square with ``unfold``, which lays its features out channel-major (``c * merge**2 + k`` for
patch ``k`` of the square). The tower hands the patches over in merge-unit order, so a square is ``merge**2``
consecutive rows and one reshape makes it a row patch-major (``k * dim + c``); ``merging_layer``'s columns are
permuted on the host to that order. On a mesh the projections are column- then row-parallel, as Qwen2.5-VL's merger;
the tokens come out whole on every chip.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.linear import Linear
from tt_models.tt.norm import RMSNorm
from tt_models.tt.tensor_parallel import gather

ACTIVATIONS = {"gelu": "gelu", "silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}  # HF's name -> the ttnn name


def patch_major(weight: torch.Tensor, merge: int) -> torch.Tensor:
    """``merging_layer``'s weight ``[dim, dim * merge**2]`` with its columns from HF's channel-major order to
    patch-major."""
    out_dim, width = weight.shape
    return weight.reshape(out_dim, width // merge ** 2, merge ** 2).transpose(1, 2).reshape(out_dim, width)


class Projector:
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 weight_dtype: Any) -> None:
        if hf_config.projector_hidden_act not in ACTIVATIONS:
            raise ValueError(f"projector_hidden_act {hf_config.projector_hidden_act!r}: expected one of "
                             f"{list(ACTIVATIONS)}")
        self.device = device
        self.merge = hf_config.spatial_merge_size
        self.norm = RMSNorm(state[f"{prefix}norm.weight"], hf_config.text_config.rms_norm_eps, device)
        self.merging = Linear(patch_major(state[f"{prefix}patch_merger.merging_layer.weight"], self.merge), device,
                              weight_dtype, parallel="column")
        self.linear_1 = Linear(state[f"{prefix}linear_1.weight"], device, weight_dtype,
                               bias=state.get(f"{prefix}linear_1.bias"),
                               activation=ACTIVATIONS[hf_config.projector_hidden_act], parallel="column")
        self.linear_2 = Linear(state[f"{prefix}linear_2.weight"], device, weight_dtype,
                               bias=state.get(f"{prefix}linear_2.bias"), parallel="row")

    def forward(self, patches: Any) -> Any:
        """Patch states ``[1, 1, patches, vision dim]`` in merge-unit order (fractured over a mesh) -> the image's
        tokens ``[1, 1, patches / merge**2, text dim]``, row-major over the merged grid (whole on every chip)."""
        normed = self.norm.forward(patches)  # whole on every chip
        squares = ttnn.reshape(normed, (1, 1, patches.shape[2] // self.merge ** 2, normed.shape[3] * self.merge ** 2))
        merged = gather(self.merging.forward(squares), self.device)
        ttnn.deallocate(normed)
        hidden = self.linear_1.forward(merged)
        ttnn.deallocate(merged)
        out = gather(self.linear_2.forward(hidden), self.device)
        ttnn.deallocate(hidden)
        return out
