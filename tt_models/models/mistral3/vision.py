"""Mistral 3's Pixtral vision tower in TT-NN: one image ``[C, h, w]`` at its own size -> its patches' states.

HF's ``PixtralVisionModel`` (transformers 5.25) up to the hidden states Mistral 3 takes (``vision_feature_layer``,
the last layer's by default), one image at a time:

- Patch embedding: the ``patch x patch`` Conv2d without bias, stride = kernel, as a matmul over the flat patches cut
  on the host in the conv weight's ``(channel, row, column)`` order; then ``ln_pre``, an RMSNorm.
- Layers: ``h = x + attn(attention_norm(x))``, ``out = h + mlp(ffn_norm(h))``; bidirectional attention without
  biases, Q/K rotated by the 2-D (axial) rotary of each patch's (row, column); a gated MLP (SiLU in Mistral-Small-3.1).
- HF runs a prompt's images as one sequence with a block-diagonal mask (an image attends only itself); here each
  image is its own sequence, which is that attention exactly, without the mask's cross-image work.

The patches enter in merge-unit order (each ``merge x merge`` square's patches consecutive, squares row-major, see
:class:`PatchGrid`) rather than HF's row-major order: every op but the attention is row-wise, and the attention sees
the same positions, so each patch's state is HF's; the projector's patch merger then takes consecutive rows.

On a mesh the patch embedding is column-parallel and the residual stream fractured, as in the text layers; the
output stays fractured (the projector's norm gathers it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs
from tt_models.tt.encoder_attention import EncoderAttention, rotation
from tt_models.tt.encoder_layer import EncoderLayer
from tt_models.tt.mlp import MLP
from tt_models.tt.model_config import Precision
from tt_models.tt.norm import RMSNorm
from tt_models.tt.patch_embedding import PatchEmbedding
from tt_models.tt.rope import transformation_matrix
from tt_models.tt.tensor_parallel import check_splits, fracture
from tt_models.tt.weights import as_tensor

NORM_EPS = 1e-5  # HF hard-codes it for ln_pre and the layers' norms
ACTIVATIONS = {"silu": "silu", "gelu": "gelu"}  # HF's hidden_act -> the ttnn name


@dataclass(frozen=True)
class VisionArgs:
    dim: int
    n_heads: int
    head_dim: int
    depth: int  # the layers run: up to the feature layer Mistral 3 takes
    patch_size: int
    channels: int
    merge: int
    activation: str
    rope_theta: float

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def token_size(self) -> int:
        """The pixels of one merged token's square side."""
        return self.patch_size * self.merge

    @classmethod
    def from_hf(cls, hf_config: Any) -> "VisionArgs":
        """From the Mistral 3 config (the vision config, ``spatial_merge_size`` and ``vision_feature_layer``)."""
        vision = hf_config.vision_config
        heads = vision.num_attention_heads
        head_dim = vision.hidden_size // heads
        if vision.hidden_act not in ACTIVATIONS:
            raise ValueError(f"vision hidden_act {vision.hidden_act!r}: expected one of {list(ACTIVATIONS)}")
        layers = vision.num_hidden_layers
        feature = hf_config.vision_feature_layer
        # HF's hidden states: [ln_pre output, layer 1, ..., layer n]; feature layer -1 is the last layer's.
        if not isinstance(feature, int) or not -(layers + 1) <= feature <= layers:
            raise ValueError(f"vision_feature_layer {feature!r}: one layer index is supported (several are not)")
        return cls(dim=vision.hidden_size, n_heads=heads, head_dim=head_dim, depth=feature % (layers + 1),
                   patch_size=vision.patch_size, channels=vision.num_channels, merge=hf_config.spatial_merge_size,
                   activation=ACTIVATIONS[vision.hidden_act], rope_theta=float(vision.rope_parameters["rope_theta"]))


@dataclass(frozen=True)
class PatchGrid:
    """One image's patches in merge-unit order: ``order`` (each position's row-major patch) and ``positions``
    ``[patches, 2]`` (its row and column, which the 2-D rotary turns with)."""
    rows: int
    cols: int
    order: torch.Tensor
    positions: torch.Tensor

    @property
    def patches(self) -> int:
        return self.rows * self.cols

    @classmethod
    def of(cls, height: int, width: int, args: VisionArgs) -> "PatchGrid":
        """The grid of an image of ``height x width`` pixels, which must be whole merged tokens (the processor
        resizes to multiples of ``patch_size * spatial_merge_size``)."""
        if height % args.token_size or width % args.token_size or not height or not width:
            raise ValueError(f"image of {height} x {width} px: height and width must be positive multiples of "
                             f"patch_size * spatial_merge_size = {args.token_size} (as the processor resizes them)")
        rows, cols, m = height // args.patch_size, width // args.patch_size, args.merge
        grid = torch.arange(rows * cols).reshape(rows // m, m, cols // m, m)
        order = grid.permute(0, 2, 1, 3).reshape(-1)
        return cls(rows, cols, order, torch.stack([order // cols, order % cols], dim=-1))


def rotary_cos_sin(positions: torch.Tensor, args: VisionArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """The axial rotary's cos/sin ``[S, head_dim]`` of patches at ``positions [S, 2]`` (row, column), in TT-NN's
    interleaved-pair order: with HF's frequencies ``f_j = theta ** (-2j / head_dim)``, pair ``k`` of the first half
    turns with the row at ``f_2k``, pair ``k`` of the second half with the column at ``f_2k+1``."""
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, args.head_dim, 2, dtype=torch.float) / args.head_dim))
    angles = torch.cat([positions[:, :1].float() * inv_freq[0::2], positions[:, 1:].float() * inv_freq[1::2]], dim=-1)
    return angles.cos().repeat_interleave(2, dim=-1), angles.sin().repeat_interleave(2, dim=-1)


def flat_patches(pixel_values: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``[C, H, W]`` -> ``[patches, C * p * p]``: patches row-major, each in the conv weight's order."""
    channels, height, width = pixel_values.shape
    p = patch_size
    grid = pixel_values.reshape(channels, height // p, p, width // p, p).permute(1, 3, 0, 2, 4)
    return grid.reshape((height // p) * (width // p), channels * p * p)


class VisionLayer(EncoderLayer):
    """``h = x + attn(attention_norm(x))``, ``out = h + mlp(ffn_norm(h))``."""

    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        super().__init__(RMSNorm(state[f"{prefix}attention_norm.weight"], NORM_EPS, device),
                         EncoderAttention(args, state, f"{prefix}attention.", device, precision.attention_weights,
                                          out_proj="o_proj", rotary=True),
                         RMSNorm(state[f"{prefix}ffn_norm.weight"], NORM_EPS, device),
                         MLP(state, f"{prefix}feed_forward.", device, precision.mlp_weights,
                             DecodeConfigs.interleaved(), activation=args.activation))


class VisionTower:
    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        # The fractured residual splits into whole tiles per chip; the MLP need not (its matmuls pad each slice).
        check_splits(device, vision_hidden_size=args.dim)
        self.args, self.device = args, device
        self.patch_embed = PatchEmbedding(state[f"{prefix}patch_conv.weight"], device, precision.attention_weights)
        self.ln_pre = RMSNorm(state[f"{prefix}ln_pre.weight"], NORM_EPS, device)
        self.trans_mat = as_tensor(transformation_matrix()[None, None], device)
        self.layers = [VisionLayer(args, state, f"{prefix}transformer.layers.{i}.", device, precision)
                       for i in range(args.depth)]

    def forward(self, pixel_values: torch.Tensor) -> tuple[Any, PatchGrid]:
        """One image ``[C, h, w]`` as the processor gives it -> its patches' states ``[1, 1, patches, dim]``
        (fractured over a mesh) in merge-unit order, and its grid."""
        args = self.args
        if pixel_values.dim() != 3 or pixel_values.shape[0] != args.channels:
            raise ValueError(f"pixel_values {list(pixel_values.shape)}: expected one image [{args.channels}, h, w]")
        grid = PatchGrid.of(*pixel_values.shape[1:], args)
        rows = flat_patches(pixel_values.float(), args.patch_size)[grid.order]
        embedded = self.patch_embed.forward(rows[None, None])  # column-parallel: comes out fractured
        normed = self.ln_pre.forward(embedded)  # whole on every chip
        ttnn.deallocate(embedded)
        x = fracture(normed, self.device)
        if x is not normed:
            ttnn.deallocate(normed)
        rot = rotation(*rotary_cos_sin(grid.positions, args), self.device)
        for layer in self.layers:
            out = layer.forward(x, None, rot, self.trans_mat)
            ttnn.deallocate(x)
            x = out
        for t in rot:
            ttnn.deallocate(t)
        return x, grid
