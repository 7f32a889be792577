"""Bidirectional self-attention of an encoder: one sequence at a time, no KV cache."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.attention import fused_qkv
from tt_models.tt.weights import as_bias, as_linear_weight


class EncoderAttention:
    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any, *,
                 out_proj: str = "out_proj") -> None:
        self.n_heads = args.n_heads
        self.scale = args.head_dim ** -0.5
        wqkv, bqkv = fused_qkv(state, prefix, args.n_heads, args.n_heads, rotary=False)
        self.wqkv = as_linear_weight(wqkv, device, weight_dtype)
        self.bqkv = None if bqkv is None else as_bias(bqkv, device)
        self.wo = as_linear_weight(state[f"{prefix}{out_proj}.weight"], device, weight_dtype)
        out_bias = state.get(f"{prefix}{out_proj}.bias")
        self.bo = None if out_bias is None else as_bias(out_bias, device)

    def forward(self, x: Any, attn_mask: Any = None) -> Any:
        """``x [1, 1, S, dim]``; keys past the logical ``S`` (tile padding) are masked by the op itself, others by
        the additive ``attn_mask [1, 1, S, S]`` if given."""
        xqkv = ttnn.linear(x, self.wqkv, bias=self.bqkv)
        q, k, v = ttnn.experimental.nlp_create_qkv_heads(
            xqkv, num_heads=self.n_heads, num_kv_heads=self.n_heads, transpose_k_heads=False)
        ttnn.deallocate(xqkv)
        attn = ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=attn_mask,
                                                            scale=self.scale)
        for t in (q, k, v):
            ttnn.deallocate(t)
        out = ttnn.experimental.nlp_concat_heads(attn)
        ttnn.deallocate(attn)
        return ttnn.linear(out, self.wo, bias=self.bo)
