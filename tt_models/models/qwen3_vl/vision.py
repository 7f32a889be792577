"""Qwen3-VL's vision tower in TT-NN: one image's patches -> its tokens in the text width, and its DeepStack features.

HF's ``Qwen3VLVisionModel`` step by step, one image at a time. Where it differs from Qwen2.5-VL's tower
(:mod:`tt_models.models.qwen2_5_vl.vision`, whose 2-D rotary, fused-QKV split and patch layout are shared):

- Patch embedding: the Conv3d (with a bias here) as a matmul over the processor's flat patches, plus learned position
  embeddings: a square ``side x side`` table resampled bilinearly (``align_corners``) to the image's ``h x w`` grid.
  The four taps of each patch are gathered from the table on the device (``ttnn.embedding``) and weighted
  (:func:`interpolation_taps` computes which rows and weights on the host, in the processor's patch order).
- Blocks of LayerNorm, bidirectional attention with the 2-D rotary over the whole frame (no window attention, so
  the patches stay in the processor's order throughout) and a GELU (tanh) MLP with biases.
- The merger: LayerNorm, each merge unit's ``2 x 2`` patches concatenated, Linear-GELU-Linear. DeepStack: after each
  block of ``deepstack_visual_indexes`` a merger of its own (the LayerNorm after the concatenation) turns that
  block's states into tokens too; the text decoder adds them after its first layers (:mod:`.text`).

On a mesh the patch embedding is column-parallel and the residual stream fractured, as in the text layers; the
outputs are gathered whole on every chip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_models.models.qwen2_5_vl.vision import rotary_cos_sin, split_qkv
from tt_models.models.qwen2_5_vl.windows import ImageLayout
from tt_models.runtime import ttnn
from tt_models.tt.embedding import Embedding
from tt_models.tt.encoder_attention import EncoderAttention, rotation
from tt_models.tt.encoder_layer import EncoderLayer
from tt_models.tt.linear import Linear
from tt_models.tt.mlp import FeedForward
from tt_models.tt.model_config import Precision
from tt_models.tt.norm import LayerNorm
from tt_models.tt.patch_embedding import PatchEmbedding
from tt_models.tt.rope import transformation_matrix
from tt_models.tt.tensor_parallel import check_splits, gather
from tt_models.tt.weights import as_tensor

NORM_EPS = 1e-6  # HF hard-codes it for the vision blocks and the mergers
ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


@dataclass(frozen=True)
class VisionArgs:
    dim: int
    n_heads: int
    head_dim: int
    depth: int
    deepstack_layers: tuple[int, ...]
    patch_size: int
    temporal_patch_size: int
    channels: int
    merge: int
    position_side: int  # the learned position table's side
    activation: str
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
        if vision_config.hidden_act not in ACTIVATIONS:
            raise ValueError(f"vision hidden_act {vision_config.hidden_act!r}: expected one of {list(ACTIVATIONS)}")
        side = int(vision_config.num_position_embeddings ** 0.5)
        if side * side != vision_config.num_position_embeddings:
            raise ValueError(f"num_position_embeddings {vision_config.num_position_embeddings} is not a square")
        return cls(dim=vision_config.hidden_size, n_heads=heads, head_dim=head_dim, depth=vision_config.depth,
                   deepstack_layers=tuple(vision_config.deepstack_visual_indexes),
                   patch_size=vision_config.patch_size, temporal_patch_size=vision_config.temporal_patch_size,
                   channels=vision_config.in_channels, merge=vision_config.spatial_merge_size, position_side=side,
                   activation=ACTIVATIONS[vision_config.hidden_act], out_dim=vision_config.out_hidden_size,
                   rope_theta=float(vision_config.rope_parameters["rope_theta"]))


def interpolation_taps(positions: torch.Tensor, grid: tuple[int, int, int],
                       side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows ``[4, S]`` of the ``side x side`` position table each patch at ``positions [S, 2]`` (row, column) of a
    ``(t, h, w)`` grid reads, and their weights ``[4, S]``: bilinear resampling with aligned corners (the table's
    corners on the grid's), as HF's ``F.interpolate`` semantics."""
    axes = []
    for index, size in zip(positions.T.float(), grid[1:]):
        source = index * (side - 1) / max(size - 1, 1)
        low = source.floor()
        taps = torch.stack([low, low + 1]).long().clamp(max=side - 1)
        axes.append((taps, torch.stack([1 - (source - low), source - low])))
    (rows, row_weights), (cols, col_weights) = axes
    taps = (rows[:, None] * side + cols[None, :]).reshape(4, -1)
    weights = (row_weights[:, None] * col_weights[None, :]).reshape(4, -1)
    return taps, weights


def mlp_state(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """HF's ``linear_fc1`` / ``linear_fc2`` under the names :class:`~tt_models.tt.mlp.FeedForward` reads."""
    return {f"{prefix}fc{i}.{kind}": state[f"{prefix}linear_fc{i}.{kind}"]
            for i in (1, 2) for kind in ("weight", "bias")}


class VisionBlock(EncoderLayer):
    """``h = x + attn(norm1(x))``, ``out = h + mlp(norm2(h))``."""

    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        super().__init__(LayerNorm(state[f"{prefix}norm1.weight"], state[f"{prefix}norm1.bias"], NORM_EPS, device),
                         EncoderAttention(args, split_qkv(state, f"{prefix}attn.", args.dim), f"{prefix}attn.", device,
                                          precision.attention_weights, out_proj="proj", rotary=True),
                         LayerNorm(state[f"{prefix}norm2.weight"], state[f"{prefix}norm2.bias"], NORM_EPS, device),
                         FeedForward(mlp_state(state, f"{prefix}mlp."), f"{prefix}mlp.", device, precision.mlp_weights,
                                     args.activation))


class PatchMerger:
    """Each merge unit's ``merge x merge`` patch states ``[1, 1, patches, dim]`` (fractured over a mesh) -> one token
    ``[1, 1, tokens, out_dim]`` (whole on every chip): LayerNorm before the concatenation (the final merger) or after
    it (DeepStack's, ``after_shuffle``), then Linear-GELU-Linear."""

    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any, dtype: Any, *,
                 after_shuffle: bool) -> None:
        self.args, self.device, self.after_shuffle = args, device, after_shuffle
        weight, bias = state[f"{prefix}norm.weight"], state[f"{prefix}norm.bias"]
        if after_shuffle:  # normalizes the gathered, concatenated row: no gather of its own
            self.norm_weight = as_tensor(weight.reshape(1, 1, 1, -1), device)
            self.norm_bias = as_tensor(bias.reshape(1, 1, 1, -1), device)
        else:
            self.norm = LayerNorm(weight, bias, NORM_EPS, device)
        self.fc1 = Linear(state[f"{prefix}linear_fc1.weight"], device, dtype, bias=state[f"{prefix}linear_fc1.bias"],
                          activation="gelu", parallel="column")
        self.fc2 = Linear(state[f"{prefix}linear_fc2.weight"], device, dtype, bias=state[f"{prefix}linear_fc2.bias"],
                          parallel="row")

    def forward(self, x: Any, tokens: int) -> Any:
        width = self.args.dim * self.args.merge ** 2
        if self.after_shuffle:
            units = ttnn.reshape(gather(x, self.device), (1, 1, tokens, width))
            normed = ttnn.layer_norm(units, epsilon=NORM_EPS, weight=self.norm_weight, bias=self.norm_bias)
        else:
            normed = ttnn.reshape(self.norm.forward(x), (1, 1, tokens, width))
        hidden = self.fc1.forward(normed)
        ttnn.deallocate(normed)
        out = gather(self.fc2.forward(hidden), self.device)
        ttnn.deallocate(hidden)
        return out


class VisionTower:
    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        # The fractured residual splits into whole tiles per chip; the MLP need not (its matmuls pad each slice).
        check_splits(device, vision_hidden_size=args.dim)
        self.args, self.device = args, device
        self.patch_embed = PatchEmbedding(state[f"{prefix}patch_embed.proj.weight"], device,
                                          precision.attention_weights, bias=state[f"{prefix}patch_embed.proj.bias"])
        self.position_table = Embedding(state[f"{prefix}pos_embed.weight"], device)  # fractured rows, as the patches
        self.trans_mat = as_tensor(transformation_matrix()[None, None], device)
        self.blocks = [VisionBlock(args, state, f"{prefix}blocks.{i}.", device, precision) for i in range(args.depth)]
        dtype = precision.attention_weights
        self.merger = PatchMerger(args, state, f"{prefix}merger.", device, dtype, after_shuffle=False)
        self.deepstack = {layer: PatchMerger(args, state, f"{prefix}deepstack_merger_list.{i}.", device, dtype,
                                             after_shuffle=True)
                          for i, layer in enumerate(args.deepstack_layers)}

    def layout(self, grid: tuple[int, int, int]) -> ImageLayout:
        """One window per frame: the processor's patch order, each frame attending itself."""
        return ImageLayout.of(grid, merge=self.args.merge, window_units=max(grid[1:]) // self.args.merge)

    def forward(self, pixel_values: torch.Tensor, grid: tuple[int, int, int]) -> list[Any]:
        """One image: ``pixel_values [t * h * w, C * T * p * p]`` as HF's processor gives them and its ``(t, h, w)``
        patch grid. Returns the merger's tokens then each DeepStack merger's, ``[1, 1, t * h * w / merge**2,
        out_dim]`` each (TILE, in the processor's order)."""
        args, device = self.args, self.device
        layout = self.layout(grid)
        if tuple(pixel_values.shape) != (layout.patches, args.patch_width):
            raise ValueError(f"pixel_values {list(pixel_values.shape)} for grid {grid}: expected "
                             f"{[layout.patches, args.patch_width]}")
        x = self._add_positions(self.patch_embed.forward(pixel_values.float()[None, None]), layout)  # fractured
        rot = rotation(*rotary_cos_sin(layout.positions, args), device)
        frames = layout.mask(layout.frame)
        mask = None if frames is None else as_tensor(frames, device)
        deepstack = []
        for i, block in enumerate(self.blocks):
            out = block.forward(x, mask, rot, self.trans_mat)
            ttnn.deallocate(x)
            x = out
            if i in self.deepstack:
                deepstack.append(self.deepstack[i].forward(x, layout.tokens))
        tokens = self.merger.forward(x, layout.tokens)
        ttnn.deallocate(x)
        return [tokens, *deepstack]

    def _add_positions(self, x: Any, layout: ImageLayout) -> Any:
        """``x`` plus each patch's resampled position embedding: the weighted sum of its four table rows."""
        taps, weights = interpolation_taps(layout.positions, layout.grid, self.args.position_side)
        for tap, weight in zip(taps, weights):
            rows = self.position_table.forward(tap)
            weighted = ttnn.multiply(rows, as_tensor(weight.reshape(1, 1, -1, 1), self.device))
            ttnn.deallocate(rows)
            out = ttnn.add(x, weighted)
            for t in (x, weighted):
                ttnn.deallocate(t)
            x = out
        return x
