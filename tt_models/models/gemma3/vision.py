"""Gemma 3's SigLIP vision tower in TT-NN: a batch of images ``[B, C, H, W]`` (every image and pan-and-scan crop is
resized to the one square the tower takes) -> their patches' states ``[B, 1, patches, dim]``. Each image is one batch
row of every op: the attention runs per row (images never attend one another), the matmuls stream the weights once
for the batch, as tt-metal's Gemma 3 tower runs its images.

HF's ``SiglipVisionModel`` up to ``last_hidden_state`` (Gemma 3 does not use SigLIP's pooling head):

- Patch embedding: the ``patch x patch`` Conv2d with stride = kernel is a matmul over the flat patches, cut on the
  host in the conv weight's ``(channel, row, column)`` order, patches row-major; then the learned position
  embeddings.
- Encoder layers: ``h = x + attn(layer_norm1(x))``, ``out = h + fc2(gelu_tanh(fc1(layer_norm2(h))))``, bidirectional
  attention over the image's patches with biases on every projection (SigLIP-so400m's heads of 72 zero-padded to
  whole tiles by :class:`~tt_models.tt.encoder_attention.EncoderAttention`, as tt-metal pads them).
- The post layernorm.

On a mesh the patch embedding is column-parallel (its bias and the position embeddings split with it), the heads and
the MLP split and the residual stream fractured, as in the text layers; the output is whole on every chip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.encoder_attention import EncoderAttention
from tt_models.tt.encoder_layer import EncoderLayer
from tt_models.tt.mlp import FeedForward
from tt_models.tt.model_config import Precision
from tt_models.tt.norm import LayerNorm
from tt_models.tt.patch_embedding import PatchEmbedding
from tt_models.tt.tensor_parallel import check_splits
from tt_models.tt.weights import as_tensor

ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


@dataclass(frozen=True)
class VisionArgs:
    dim: int
    n_heads: int
    head_dim: int
    depth: int
    image_size: int
    patch_size: int
    channels: int
    norm_eps: float
    activation: str  # the ttnn name

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @classmethod
    def from_hf(cls, vision_config: Any) -> "VisionArgs":
        heads = vision_config.num_attention_heads
        head_dim = vision_config.hidden_size // heads
        if vision_config.hidden_act not in ACTIVATIONS:
            raise ValueError(f"vision hidden_act {vision_config.hidden_act!r}: expected one of {list(ACTIVATIONS)}")
        return cls(dim=vision_config.hidden_size, n_heads=heads, head_dim=head_dim,
                   depth=vision_config.num_hidden_layers, image_size=vision_config.image_size,
                   patch_size=vision_config.patch_size, channels=vision_config.num_channels,
                   norm_eps=vision_config.layer_norm_eps, activation=ACTIVATIONS[vision_config.hidden_act])


def flat_patches(pixel_values: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``[B, C, H, W]`` -> ``[B, patches, C * p * p]``: patches row-major, each in the conv weight's order."""
    batch, channels, height, width = pixel_values.shape
    p = patch_size
    grid = pixel_values.reshape(batch, channels, height // p, p, width // p, p).permute(0, 2, 4, 1, 3, 5)
    return grid.reshape(batch, (height // p) * (width // p), channels * p * p)


class SiglipLayer(EncoderLayer):
    """``h = x + attn(layer_norm1(x))``, ``out = h + fc2(act(fc1(layer_norm2(h))))``."""

    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 weight_dtype: Any) -> None:
        attn = f"{prefix}self_attn."
        super().__init__(LayerNorm(state[f"{prefix}layer_norm1.weight"], state[f"{prefix}layer_norm1.bias"],
                                   args.norm_eps, device),
                         EncoderAttention(args, state, attn, device, weight_dtype),
                         LayerNorm(state[f"{prefix}layer_norm2.weight"], state[f"{prefix}layer_norm2.bias"],
                                   args.norm_eps, device),
                         FeedForward(state, f"{prefix}mlp.", device, weight_dtype, args.activation))


class VisionTower:
    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        # The fractured residual splits into whole tiles per chip; the MLP need not (its matmuls pad each slice).
        check_splits(device, vision_hidden_size=args.dim)
        self.args, self.device = args, device
        dtype = precision.attention_weights
        self.patch_embed = PatchEmbedding(state[f"{prefix}embeddings.patch_embedding.weight"], device, dtype,
                                          bias=state[f"{prefix}embeddings.patch_embedding.bias"])
        self.positions = as_tensor(state[f"{prefix}embeddings.position_embedding.weight"][None, None], device,
                                   shard_dim=-1)
        self.layers = [SiglipLayer(args, state, f"{prefix}encoder.layers.{i}.", device, dtype)
                       for i in range(args.depth)]
        self.post_norm = LayerNorm(state[f"{prefix}post_layernorm.weight"], state[f"{prefix}post_layernorm.bias"],
                                   args.norm_eps, device)

    def forward(self, pixel_values: torch.Tensor) -> Any:
        """Images ``[B, C, image_size, image_size]`` as HF's processor gives them -> ``[B, 1, patches, dim]``."""
        args = self.args
        expected = (args.channels, args.image_size, args.image_size)
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != expected:
            shape = ", ".join(map(str, expected))
            raise ValueError(f"pixel_values {list(pixel_values.shape)}: expected [images, {shape}]")
        embedded = self.patch_embed.forward(flat_patches(pixel_values.float(), args.patch_size)[:, None])
        # The position embeddings [1, 1, patches, dim] broadcast over the images; fractured, as the column-parallel
        # patch embedding comes out.
        x = ttnn.add(embedded, self.positions)
        ttnn.deallocate(embedded)
        for layer in self.layers:
            out = layer.forward(x)
            ttnn.deallocate(x)
            x = out
        out = self.post_norm.forward(x)
        ttnn.deallocate(x)
        return out
