"""Bidirectional self-attention of an encoder: each batch row one sequence, no KV cache (heads split over a mesh's chips
as in :class:`~tt_models.tt.attention.Attention`). With ``rotary`` (Qwen2.5-VL's vision tower) Q/K are rotated by
``rotary_embedding_llama`` with the cos/sin the caller gives per token."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.attention import fused_qkv, output_projection
from tt_models.tt.linear import Linear
from tt_models.tt.tensor_parallel import HeadSplit, chips
from tt_models.tt.weights import as_tensor


def rotation(cos: torch.Tensor, sin: torch.Tensor, device: Any) -> tuple[Any, Any]:
    """A rotary's cos/sin ``[S, head_dim]`` (host) as the ``rot`` pair :meth:`EncoderAttention.forward` takes."""
    return as_tensor(cos[None, None], device), as_tensor(sin[None, None], device)


class EncoderAttention:
    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any, *,
                 out_proj: str = "out_proj", rotary: bool = False, scale: float | None = None) -> None:
        """``scale``: the logits' scale when it is not ``args.head_dim ** -0.5`` (heads zero-padded to whole tiles
        keep their real head_dim's)."""
        split = HeadSplit.of(args.n_heads, args.n_heads, chips(device))
        self.n_local_heads = split.q_per_chip
        self.scale = args.head_dim ** -0.5 if scale is None else scale
        wqkv, bqkv = fused_qkv(state, prefix, split, args.head_dim, rotary=rotary)
        self.wqkv = Linear(wqkv, device, weight_dtype, bias=bqkv, parallel="column")
        self.wo = Linear(output_projection(state[f"{prefix}{out_proj}.weight"], split, args.head_dim), device,
                         weight_dtype, bias=state.get(f"{prefix}{out_proj}.bias"), parallel="row")

    def forward(self, x: Any, attn_mask: Any = None, rot: tuple[Any, Any] | None = None, trans_mat: Any = None) -> Any:
        """``x [B, 1, S, dim]``: B sequences, each attending only itself (Gemma 3's batched images; the other
        towers run one); keys past the logical ``S`` (tile padding) are masked by the op itself, others by the
        additive ``attn_mask [1, 1, S, S]`` if given. ``rot``: cos/sin ``[1, 1, S, head_dim]`` (rotary only)."""
        xqkv = self.wqkv.forward(x)
        q, k, v = ttnn.experimental.nlp_create_qkv_heads(
            xqkv, num_heads=self.n_local_heads, num_kv_heads=self.n_local_heads, transpose_k_heads=False)
        ttnn.deallocate(xqkv)
        if rot is not None:
            q = ttnn.experimental.rotary_embedding_llama(q, *rot, trans_mat, is_decode_mode=False)
            k = ttnn.experimental.rotary_embedding_llama(k, *rot, trans_mat, is_decode_mode=False)
        attn = ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=attn_mask,
                                                            scale=self.scale)
        for t in (q, k, v):
            ttnn.deallocate(t)
        out = ttnn.experimental.nlp_concat_heads(attn)
        ttnn.deallocate(attn)
        return self.wo.forward(out)
