"""The Mllama (Llama 3.2 Vision) vision encoder in TT-NN: one image's tiles -> its vision tokens.

HF's ``MllamaVisionModel`` step by step, for one image padded to ``max_num_tiles`` tiles (as HF's processor pads):

- Patch embedding: the stride-``patch`` conv is a matmul over patches unfolded on the host (as tt_transformers'
  conv2d patch does), with an all-zero patch where each tile's class token goes and after its last patch.
- One additive embedding per aspect ratio, folded on the host at load: the gated pre-tile embedding (patches
  only), the class embedding (row 0), and the gated positional + tile-positional embeddings.
- ``layernorm_pre``; each tile then holds ``padded_patches`` = ``patches`` rounded up to 8 tokens, the extra ones
  zero, exactly as HF pads them: HF's attention mask lets real tokens attend them.
- The local transformer (keeping the outputs of ``intermediate_layers_indices``), ``layernorm_post``, the gated
  post-tile embedding and the gated global transformer, all under HF's aspect-ratio attention mask.
- Output ``[1, 1, max_num_tiles * patches, dim * (1 + n_intermediate)]``: per token the final state, then each
  intermediate state. HF interleaves the intermediates feature by feature; :func:`hf_projector_columns` gives the
  projector the matching column order.

On a mesh the patch embedding is column-parallel, so the residual stream is fractured as in the text layers, and
the heads split over the chips; the output is gathered whole on every chip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.encoder_attention import EncoderAttention
from tt_models.tt.mlp import FeedForward
from tt_models.tt.model_config import Precision
from tt_models.tt.norm import LayerNorm
from tt_models.tt.tensor_parallel import fracture, gather
from tt_models.tt.weights import as_linear_weight, as_tensor

TILE = 32


@dataclass(frozen=True)
class VisionArgs:
    dim: int
    n_heads: int
    head_dim: int
    layers: int
    global_layers: int
    intermediate_layers: tuple[int, ...]
    image_size: int
    patch_size: int
    channels: int
    max_num_tiles: int
    max_aspect_ratio_id: int
    eps: float
    activation: str

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def patches(self) -> int:
        """Tokens per tile: the patches and the class token."""
        return (self.image_size // self.patch_size) ** 2 + 1

    @property
    def padded_patches(self) -> int:
        return -(-self.patches // 8) * 8

    @property
    def vision_tokens(self) -> int:
        """Vision tokens of one image (padding tiles included, as HF's cross-attention sees them)."""
        return self.max_num_tiles * self.patches

    @property
    def output_dim(self) -> int:
        return self.dim * (1 + len(self.intermediate_layers))

    @classmethod
    def from_hf(cls, vision_config: Any) -> "VisionArgs":
        heads = vision_config.attention_heads
        head_dim = vision_config.hidden_size // heads
        size, patch = vision_config.image_size, vision_config.patch_size
        if not isinstance(size, int) or not isinstance(patch, int):
            raise ValueError(f"square tiles and patches only, got image_size={size}, patch_size={patch}")
        return cls(dim=vision_config.hidden_size, n_heads=heads, head_dim=head_dim,
                   layers=vision_config.num_hidden_layers, global_layers=vision_config.num_global_layers,
                   intermediate_layers=tuple(vision_config.intermediate_layers_indices), image_size=size,
                   patch_size=patch, channels=vision_config.num_channels, max_num_tiles=vision_config.max_num_tiles,
                   max_aspect_ratio_id=vision_config.max_aspect_ratio_id, eps=vision_config.norm_eps,
                   activation=vision_config.hidden_act)


def hf_projector_columns(args: VisionArgs) -> torch.Tensor:
    """For each column of our vision output, the column of HF's (final state, then the intermediates
    interleaved: feature ``d`` of intermediate ``i`` at ``dim + d * n + i``)."""
    n = len(args.intermediate_layers)
    inter = torch.arange(args.dim * n).reshape(args.dim, n).T.reshape(-1)
    return torch.cat([torch.arange(args.dim), args.dim + inter])


def _gate(state: dict[str, torch.Tensor], name: str) -> float:
    return math.tanh(float(state[name]))


class VisionLayer:
    """Pre-norm encoder layer; the global transformer's layers scale both residual branches by tanh gates."""

    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision, gated: bool) -> None:
        self.attention_norm = LayerNorm(state[f"{prefix}input_layernorm.weight"],
                                        state[f"{prefix}input_layernorm.bias"], args.eps, device)
        self.attention = EncoderAttention(args, state, f"{prefix}self_attn.", device, precision.attention_weights,
                                          out_proj="o_proj")
        self.ffn_norm = LayerNorm(state[f"{prefix}post_attention_layernorm.weight"],
                                  state[f"{prefix}post_attention_layernorm.bias"], args.eps, device)
        self.ffn = FeedForward(state, f"{prefix}mlp.", device, precision.mlp_weights, args.activation)
        self.gate_attn = _gate(state, f"{prefix}gate_attn") if gated else None
        self.gate_ffn = _gate(state, f"{prefix}gate_ffn") if gated else None

    @staticmethod
    def _add(x: Any, branch: Any, gate: float | None) -> Any:
        if gate is not None:
            scaled = ttnn.multiply(branch, gate)
            ttnn.deallocate(branch)
            branch = scaled
        out = ttnn.add(x, branch)
        ttnn.deallocate(branch)
        return out

    def forward(self, x: Any, mask: Any) -> Any:
        normed = self.attention_norm.forward(x)
        h = self._add(x, self.attention.forward(normed, mask), self.gate_attn)
        ttnn.deallocate(normed)
        normed = self.ffn_norm.forward(h)
        out = self._add(h, self.ffn.forward(normed), self.gate_ffn)
        ttnn.deallocate(normed)
        ttnn.deallocate(h)
        return out


class VisionEncoder:
    def __init__(self, args: VisionArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision) -> None:
        self.args, self.device = args, device
        conv = state[f"{prefix}patch_embedding.weight"]  # [dim, C, p, p], unfold's (C, kh, kw) order
        self.patch_width = -(-conv[0].numel() // TILE) * TILE
        patch_weight = torch.nn.functional.pad(conv.reshape(args.dim, -1), (0, self.patch_width - conv[0].numel()))
        self.patch_weight = as_linear_weight(patch_weight, device, precision.attention_weights, shard_dim=-1)
        self.embeddings = [as_tensor(e[None], device, shard_dim=-1) for e in self._embeddings(state, prefix)]
        self.post_tile = [as_tensor(e[None], device) for e in self._tile_embeddings(
            state, f"{prefix}post_tile_positional_embedding.")]
        self.pre_norm = LayerNorm(state[f"{prefix}layernorm_pre.weight"], state[f"{prefix}layernorm_pre.bias"],
                                  args.eps, device)
        self.post_norm = LayerNorm(state[f"{prefix}layernorm_post.weight"], state[f"{prefix}layernorm_post.bias"],
                                   args.eps, device)
        real_rows = (torch.arange(args.padded_patches) < args.patches).float()
        self.real_rows = as_tensor(real_rows.reshape(1, 1, -1, 1), device)
        self.layers = [VisionLayer(args, state, f"{prefix}transformer.layers.{i}.", device, precision, gated=False)
                       for i in range(args.layers)]
        self.global_layers = [VisionLayer(args, state, f"{prefix}global_transformer.layers.{i}.", device, precision,
                                          gated=True) for i in range(args.global_layers)]
        self.masks: dict[int, Any] = {}  # attention mask per real-tile count

    def _tile_embeddings(self, state: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
        """Gated per-tile embeddings ``[aspect ratio id, tiles, 1, dim]``."""
        table = state[f"{prefix}embedding.weight"].float()
        return math.tanh(float(state[f"{prefix}gate"])) * table.reshape(-1, self.args.max_num_tiles, 1, self.args.dim)

    def _embeddings(self, state: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
        """Everything HF adds before ``layernorm_pre``, per aspect ratio id: ``[ids, tiles, padded_patches, dim]``."""
        args = self.args
        ids, tiles, patches = args.max_aspect_ratio_id + 1, args.max_num_tiles, args.patches
        positional = f"{prefix}gated_positional_embedding."
        gate = math.tanh(float(state[f"{positional}gate"]))
        tile_positions = state[f"{positional}tile_embedding.weight"].float().reshape(ids, tiles, patches, args.dim)
        out = (1 - gate) * state[f"{positional}embedding"].float() + gate * tile_positions
        out[:, :, 0] += state[f"{prefix}class_embedding"].float()
        out[:, :, 1:] += self._tile_embeddings(state, f"{prefix}pre_tile_positional_embedding.")
        return torch.nn.functional.pad(out, (0, 0, 0, args.padded_patches - patches))

    def _patches(self, pixel_values: torch.Tensor) -> Any:
        """``[tiles, C, H, W]`` -> ``[1, tiles, padded_patches, patch_width]``: row 0 (the class token) and the rows
        past the last patch are zero."""
        p, args = self.args.patch_size, self.args
        unfolded = torch.nn.functional.unfold(pixel_values.float(), kernel_size=p, stride=p).transpose(1, 2)
        rows = torch.zeros(args.max_num_tiles, args.padded_patches, self.patch_width)
        rows[:, 1: args.patches, : unfolded.shape[2]] = unfolded
        return as_tensor(rows[None], self.device)

    def _mask(self, num_tiles: int) -> Any:
        """HF's aspect-ratio mask ``[1, 1, S, S]``: a key is hidden from a query only when both are padding
        (a padding tile, or a tile's padding tokens)."""
        if num_tiles not in self.masks:
            args = self.args
            real = ((torch.arange(args.max_num_tiles) < num_tiles)[:, None]
                    & (torch.arange(args.padded_patches) < args.patches)[None, :]).reshape(-1)
            padding = ~real
            mask = torch.zeros(len(real), len(real))
            mask[padding[:, None] & padding[None, :]] = torch.finfo(torch.bfloat16).min
            self.masks[num_tiles] = as_tensor(mask[None, None], self.device)
        return self.masks[num_tiles]

    def forward(self, pixel_values: torch.Tensor, aspect_ratio_id: int, num_tiles: int) -> Any:
        """One image: ``pixel_values [max_num_tiles, C, H, W]`` as HF's processor gives them, its aspect ratio id
        (1-based) and real tile count. Returns ``[1, 1, max_num_tiles * patches, output_dim]``."""
        args = self.args
        tiles, padded = args.max_num_tiles, args.padded_patches
        if tuple(pixel_values.shape) != (tiles, args.channels, args.image_size, args.image_size):
            raise ValueError(f"pixel_values {list(pixel_values.shape)}: expected "
                             f"{[tiles, args.channels, args.image_size, args.image_size]}")
        if not 1 <= aspect_ratio_id <= args.max_aspect_ratio_id or not 1 <= num_tiles <= tiles:
            raise ValueError(f"aspect_ratio_id {aspect_ratio_id} / num_tiles {num_tiles} out of range")
        patches = self._patches(pixel_values)
        x = ttnn.linear(patches, self.patch_weight)
        ttnn.deallocate(patches)
        x = ttnn.add(x, self.embeddings[aspect_ratio_id])
        x = ttnn.multiply(self.pre_norm.forward(x), self.real_rows)  # HF pads after layernorm_pre: with zeros
        x = fracture(ttnn.reshape(x, (1, 1, tiles * padded, args.dim)), self.device)
        mask = self._mask(num_tiles)
        intermediates = []
        for i, layer in enumerate(self.layers):
            out = layer.forward(x, mask)
            if i == 0 or i - 1 not in args.intermediate_layers:
                ttnn.deallocate(x)
            x = out
            if i in args.intermediate_layers:
                intermediates.append(x)
        x = self.post_norm.forward(x)
        x = ttnn.reshape(x, (1, tiles, padded, args.dim))
        x = ttnn.add(x, self.post_tile[aspect_ratio_id])
        x = fracture(ttnn.reshape(x, (1, 1, tiles * padded, args.dim)), self.device)
        for layer in self.global_layers:
            x = layer.forward(x, mask)
        x = ttnn.concat([gather(t, self.device) for t in (x, *intermediates)], dim=-1)
        x = ttnn.reshape(x, (1, tiles, padded, args.output_dim))
        x = ttnn.slice(x, (0, 0, 0, 0), (1, tiles, args.patches, args.output_dim))
        return ttnn.reshape(x, (1, 1, tiles * args.patches, args.output_dim))
