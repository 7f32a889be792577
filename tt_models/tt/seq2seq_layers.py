"""Encoder and decoder layers of HF's encoder-decoder models (Whisper, BART, MBart share their names).

``pre_norm`` (Whisper, MBart): ``x + sublayer(norm(x))``; otherwise (BART) ``norm(x + sublayer(x))``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tt_models.runtime import ttnn
from tt_models.tt.attention import Attention
from tt_models.tt.cross_attention import CrossAttention
from tt_models.tt.encoder_attention import EncoderAttention
from tt_models.tt.mlp import FeedForward
from tt_models.tt.norm import LayerNorm


def _norm(state: dict[str, torch.Tensor], prefix: str, eps: float, device: Any) -> LayerNorm:
    return LayerNorm(state[f"{prefix}.weight"], state[f"{prefix}.bias"], eps, device)


def _residual(x: Any, sublayer: Callable[[Any], Any], norm: LayerNorm, pre_norm: bool) -> Any:
    if pre_norm:
        normed = norm.forward(x)
        out = ttnn.add(x, sublayer(normed))
        ttnn.deallocate(normed)
        return out
    summed = ttnn.add(x, sublayer(x))
    out = norm.forward(summed)
    ttnn.deallocate(summed)
    return out


class EncoderLayer:
    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, precision: Any) -> None:
        self.pre_norm = args.pre_norm
        self.self_attn = EncoderAttention(args, state, f"{prefix}self_attn.", device, precision.attention_weights)
        self.self_attn_norm = _norm(state, f"{prefix}self_attn_layer_norm", args.eps, device)
        self.ffn = FeedForward(state, prefix, device, precision.mlp_weights, args.activation)
        self.ffn_norm = _norm(state, f"{prefix}final_layer_norm", args.eps, device)

    def forward(self, x: Any) -> Any:
        h = _residual(x, self.self_attn.forward, self.self_attn_norm, self.pre_norm)
        return _residual(h, self.ffn.forward, self.ffn_norm, self.pre_norm)


class CrossDecoderLayer:
    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, precision: Any) -> None:
        self.pre_norm = args.pre_norm
        self.self_attn = Attention(args, state, f"{prefix}self_attn.", device, precision.attention_weights,
                                   rotary=False, out_proj="out_proj")
        self.self_attn_norm = _norm(state, f"{prefix}self_attn_layer_norm", args.eps, device)
        self.cross_attn = CrossAttention(args, state, f"{prefix}encoder_attn.", device, precision.attention_weights)
        self.cross_attn_norm = _norm(state, f"{prefix}encoder_attn_layer_norm", args.eps, device)
        self.ffn = FeedForward(state, prefix, device, precision.mlp_weights, args.activation)
        self.ffn_norm = _norm(state, f"{prefix}final_layer_norm", args.eps, device)

    def _cross_and_ffn(self, h: Any, kv_cache: tuple[Any, Any], cross: tuple[list[Any], list[Any]]) -> Any:
        h = _residual(h, lambda t: self.cross_attn.forward(t, kv_cache, *cross), self.cross_attn_norm, self.pre_norm)
        return _residual(h, self.ffn.forward, self.ffn_norm, self.pre_norm)

    def forward_prefill(self, x: Any, kv_cache: tuple[Any, Any], cross: tuple[list[Any], list[Any]],
                        **attention_kwargs: Any) -> Any:
        """``cross``: per 32-row group, the cross page tables and positions (see CrossAttention.forward)."""
        h = _residual(x, lambda t: self.self_attn.forward_prefill(t, kv_cache, **attention_kwargs),
                      self.self_attn_norm, self.pre_norm)
        return self._cross_and_ffn(h, kv_cache, cross)

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], cross: tuple[list[Any], list[Any]],
                       **attention_kwargs: Any) -> Any:
        h = _residual(x, lambda t: self.self_attn.forward_decode(t, kv_cache, **attention_kwargs),
                      self.self_attn_norm, self.pre_norm)
        return self._cross_and_ffn(h, kv_cache, cross)
