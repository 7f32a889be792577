"""Qwen2.5-VL's vision tower in TT-NN: one image's patches -> its tokens in the text width.

HF's ``Qwen2_5_VisionTransformerPretrainedModel`` step by step, one image at a time (as tt-metal runs it):

- Patch embedding: the Conv3d over ``temporal_patch_size x patch x patch`` with stride = kernel is a matmul over the
  flat patches HF's processor gives (``[patches, C * T * p * p]``, the conv weight's own order). The rows are put in
  window order on the host first (the embedding is row-wise, so this equals HF's reordering after it).
- Blocks of RMSNorm, bidirectional attention with the 2-D rotary (row positions on the first quarter of the
  frequencies, column positions on the second, see :mod:`windows`) and a SwiGLU MLP with biases. The
  ``fullatt_block_indexes`` layers attend the whole image, the others their window (additive masks).
- The merger: RMSNorm, each merge unit's ``2 x 2`` patches concatenated, Linear-GELU-Linear; then the tokens are
  gathered back into the processor's order on the device (``ttnn.embedding`` over the merger's rows).

On a mesh the patch embedding is column-parallel and the residual stream fractured, as in the text layers; the
output is gathered whole on every chip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_models.models.qwen2_5_vl.windows import ImageLayout
from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs
from tt_models.tt.encoder_attention import EncoderAttention, rotation
from tt_models.tt.encoder_layer import EncoderLayer
from tt_models.tt.linear import Linear
from tt_models.tt.mlp import MLP
from tt_models.tt.model_config import Precision
from tt_models.tt.norm import RMSNorm
from tt_models.tt.patch_embedding import PatchEmbedding
from tt_models.tt.rope import transformation_matrix
from tt_models.tt.tensor_parallel import check_splits, gather
from tt_models.tt.weights import as_tensor, mesh_mapper

NORM_EPS = 1e-6  # HF hard-codes it for the vision blocks and the merger


@dataclass(frozen=True)
class VisionArgs:
    dim: int
    n_heads: int
    head_dim: int
    depth: int
    full_attention_layers: tuple[int, ...]
    patch_size: int
    temporal_patch_size: int
    channels: int
    merge: int
    window_units: int
    out_dim: int
    rope_theta: float

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def patch_width(self) -> int:
        return self.channels * self.temporal_patch_size * self.patch_size ** 2

    @classmethod
    def from_hf(cls, vision_config: Any) -> "VisionArgs":
        heads = vision_config.num_heads
        head_dim = vision_config.hidden_size // heads
        if vision_config.hidden_act != "silu":
            raise ValueError(f"vision hidden_act {vision_config.hidden_act!r}: the SwiGLU blocks take silu")
        merge = vision_config.spatial_merge_size
        return cls(dim=vision_config.hidden_size, n_heads=heads, head_dim=head_dim, depth=vision_config.depth,
                   full_attention_layers=tuple(vision_config.fullatt_block_indexes),
                   patch_size=vision_config.patch_size, temporal_patch_size=vision_config.temporal_patch_size,
                   channels=vision_config.in_channels, merge=merge,
                   window_units=vision_config.window_size // merge // vision_config.patch_size,
                   out_dim=vision_config.out_hidden_size,
                   rope_theta=float(vision_config.rope_parameters["rope_theta"]))


def rotary_cos_sin(positions: torch.Tensor, args: VisionArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """The 2-D rotary's cos/sin ``[S, head_dim]`` of patches at ``positions [S, 2]`` (row, column), in TT-NN's
    interleaved-pair order: pair ``k`` of the first quarter turns with the row, of the second with the column."""
    quarter = args.head_dim // 4
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, 2 * quarter, 2, dtype=torch.float) / (2 * quarter)))
    angles = (positions.float()[:, :, None] * inv_freq).reshape(len(positions), 2 * quarter)
    return angles.cos().repeat_interleave(2, dim=-1), angles.sin().repeat_interleave(2, dim=-1)


def split_qkv(state: dict[str, torch.Tensor], prefix: str, dim: int) -> dict[str, torch.Tensor]:
    """HF's fused ``qkv`` (``[q; k; v]`` rows) as the ``q_proj`` / ``k_proj`` / ``v_proj`` the attention block reads,
    with the output projection ``proj``."""
    out = {f"{prefix}proj.{kind}": state[f"{prefix}proj.{kind}"] for kind in ("weight", "bias")}
    for kind in ("weight", "bias"):
        for name, part in zip("qkv", state[f"{prefix}qkv.{kind}"].split(dim)):
            out[f"{prefix}{name}_proj.{kind}"] = part
    return out


class VisionBlock(EncoderLayer):
    """``h = x + attn(norm1(x))``, ``out = h + mlp(norm2(h))``."""

    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        super().__init__(RMSNorm(state[f"{prefix}norm1.weight"], NORM_EPS, device),
                         EncoderAttention(args, split_qkv(state, f"{prefix}attn.", args.dim), f"{prefix}attn.", device,
                                          precision.attention_weights, out_proj="proj", rotary=True),
                         RMSNorm(state[f"{prefix}norm2.weight"], NORM_EPS, device),
                         MLP(state, f"{prefix}mlp.", device, precision.mlp_weights, DecodeConfigs.interleaved()))


class VisionTower:
    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        # The fractured residual splits into whole tiles per chip; the MLP need not (its matmuls pad each slice).
        check_splits(device, vision_hidden_size=args.dim)
        self.args, self.device = args, device
        self.patch_embed = PatchEmbedding(state[f"{prefix}patch_embed.proj.weight"], device,
                                          precision.attention_weights)
        self.trans_mat = as_tensor(transformation_matrix()[None, None], device)
        self.blocks = [VisionBlock(args, state, f"{prefix}blocks.{i}.", device, precision) for i in range(args.depth)]
        self.merger_norm = RMSNorm(state[f"{prefix}merger.ln_q.weight"], NORM_EPS, device)
        self.merger_in = Linear(state[f"{prefix}merger.mlp.0.weight"], device, precision.attention_weights,
                                bias=state[f"{prefix}merger.mlp.0.bias"], activation="gelu", parallel="column")
        self.merger_out = Linear(state[f"{prefix}merger.mlp.2.weight"], device, precision.attention_weights,
                                 bias=state[f"{prefix}merger.mlp.2.bias"], parallel="row")

    def layout(self, grid: tuple[int, int, int]) -> ImageLayout:
        return ImageLayout.of(grid, merge=self.args.merge, window_units=self.args.window_units)

    def forward(self, pixel_values: torch.Tensor, grid: tuple[int, int, int]) -> Any:
        """One image: ``pixel_values [t * h * w, C * T * p * p]`` as HF's processor gives them and its ``(t, h, w)``
        patch grid. Returns its tokens ``[1, 1, t * h * w / merge**2, out_dim]`` (TILE, in the processor's order)."""
        args, device = self.args, self.device
        layout = self.layout(grid)
        if tuple(pixel_values.shape) != (layout.patches, args.patch_width):
            raise ValueError(f"pixel_values {list(pixel_values.shape)} for grid {grid}: expected "
                             f"{[layout.patches, args.patch_width]}")
        x = self.patch_embed.forward(pixel_values.float()[layout.order][None, None])  # fractured
        rot = rotation(*rotary_cos_sin(layout.positions, args), device)
        masks = {full: None if m is None else as_tensor(m, device)
                 for full, m in ((True, layout.mask(layout.frame)), (False, layout.mask(layout.window)))}
        for i, block in enumerate(self.blocks):
            out = block.forward(x, masks[i in args.full_attention_layers], rot, self.trans_mat)
            ttnn.deallocate(x)
            x = out
        normed = self.merger_norm.forward(x)
        ttnn.deallocate(x)
        units = ttnn.reshape(normed, (1, 1, layout.tokens, args.dim * args.merge ** 2))
        hidden = self.merger_in.forward(units)
        merged = gather(self.merger_out.forward(hidden), device)
        ttnn.deallocate(hidden)
        return self._restore(merged, layout)

    def _restore(self, merged: Any, layout: ImageLayout) -> Any:
        """The merger's rows (window order) gathered into the processor's order, on the device."""
        table = ttnn.to_layout(merged, ttnn.ROW_MAJOR_LAYOUT)
        ttnn.deallocate(merged)
        ids = ttnn.from_torch(layout.restore[None].to(torch.int32), dtype=ttnn.uint32, layout=ttnn.ROW_MAJOR_LAYOUT,
                              device=self.device, mesh_mapper=mesh_mapper(self.device))
        out = ttnn.embedding(ids, table, layout=ttnn.TILE_LAYOUT)
        ttnn.deallocate(table)
        return ttnn.reshape(out, (1, 1, layout.tokens, self.args.out_dim))
