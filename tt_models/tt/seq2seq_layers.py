"""Encoder and decoder layers of HF's encoder-decoder models (Whisper, BART, MBart share their names).

``pre_norm`` (Whisper, MBart): ``x + sublayer(norm(x))``; otherwise (BART) ``norm(x + sublayer(x))``.
In decode the residual stream stays in ``decode.residual``, as in the Llama family's blocks. On a mesh the residual
is fractured (:mod:`tt_models.tt.tensor_parallel`): a post-norm's whole-row output is fractured again.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tt_models.runtime import ttnn
from tt_models.tt.attention import Attention
from tt_models.tt.cross_attention import CrossAttention
from tt_models.tt.decode_configs import DecodeConfigs, ShardedNorm, reshard
from tt_models.tt.encoder_attention import EncoderAttention
from tt_models.tt.mlp import FeedForward
from tt_models.tt.norm import LayerNorm
from tt_models.tt.residual import pre_norm_residual
from tt_models.tt.tensor_parallel import fracture, gather


def _norm(state: dict[str, torch.Tensor], prefix: str, eps: float, device: Any) -> LayerNorm:
    return LayerNorm(state[f"{prefix}.weight"], state[f"{prefix}.bias"], eps, device)


def _residual(x: Any, sublayer: Callable[[Any], Any], norm: LayerNorm, pre_norm: bool) -> Any:
    if pre_norm:
        return pre_norm_residual(x, norm, sublayer)
    summed = ttnn.add(x, sublayer(gather(x, norm.device)))  # a sublayer reads whole rows
    out = fracture(norm.forward(summed), norm.device)
    ttnn.deallocate(summed)
    return out


def _residual_decode(x: Any, sublayer: Callable[[Any], Any], norm: LayerNorm, pre_norm: bool,
                     norm_layout: ShardedNorm | None, decode: DecodeConfigs) -> Any:
    """:func:`_residual` on the decode layouts: a pre-norm feeds the sublayer on ``norm_layout``, a post-norm's
    output is the next residual (on the residual's own layout)."""
    if pre_norm:
        normed = norm.forward(x, norm_layout)
        out = ttnn.add(x, reshard(sublayer(normed), decode.residual), memory_config=decode.residual)
        ttnn.deallocate(normed)
        return out
    summed = ttnn.add(x, reshard(sublayer(gather(x, norm.device)), decode.residual), memory_config=decode.residual)
    out = reshard(fracture(norm.forward(summed, decode.attention_norm), norm.device), decode.residual)
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
    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, precision: Any,
                 decode: DecodeConfigs) -> None:
        self.pre_norm = args.pre_norm
        self.decode = decode
        self.self_attn = Attention(args, state, f"{prefix}self_attn.", device, precision.attention_weights, decode,
                                   rotary=False, out_proj="out_proj")
        self.self_attn_norm = _norm(state, f"{prefix}self_attn_layer_norm", args.eps, device)
        self.cross_attn = CrossAttention(args, state, f"{prefix}encoder_attn.", device, precision.attention_weights,
                                         decode)
        self.cross_attn_norm = _norm(state, f"{prefix}encoder_attn_layer_norm", args.eps, device)
        self.ffn = FeedForward(state, prefix, device, precision.mlp_weights, args.activation, decode)
        self.ffn_norm = _norm(state, f"{prefix}final_layer_norm", args.eps, device)

    def _cross_and_ffn(self, h: Any, kv_cache: tuple[Any, Any], cross: tuple[list[Any], list[Any]]) -> Any:
        h = _residual(h, lambda t: self.cross_attn.forward(t, kv_cache, *cross), self.cross_attn_norm, self.pre_norm)
        return _residual(h, self.ffn.forward, self.ffn_norm, self.pre_norm)

    def forward_prefill(self, x: Any, kv_cache: tuple[Any, Any], cross: tuple[list[Any], list[Any]],
                        **attention_kwargs: Any) -> Any:
        """``cross``: per 32-row group, the cross page tables and positions (see CrossAttention.forward)."""
        return self._cross_and_ffn(self.self_attention_prefill(x, kv_cache, **attention_kwargs), kv_cache, cross)

    def self_attention_prefill(self, x: Any, kv_cache: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        """The residual stream after the self-attention sublayer (the cross-attention sublayer's input)."""
        return _residual(x, lambda t: self.self_attn.forward_prefill(t, kv_cache, **attention_kwargs),
                         self.self_attn_norm, self.pre_norm)

    def forward_prefill_with_cross_weights(self, x: Any, kv_cache: tuple[Any, Any],
                                           cross: tuple[list[Any], list[Any]], cross_blocks: list[int],
                                           encoder_len: int, heads: list[int],
                                           **attention_kwargs: Any) -> tuple[Any, Any]:
        """:meth:`forward_prefill` and the cross-attention probabilities of ``heads`` (see
        ``CrossAttention.head_weights``)."""
        h = self.self_attention_prefill(x, kv_cache, **attention_kwargs)
        if not self.pre_norm:  # a post-norm layer's cross-attention reads the residual stream itself
            return self._cross_and_ffn(h, kv_cache, cross), self.cross_attn.head_weights(
                gather(h, self.cross_attn_norm.device), kv_cache[0], cross_blocks, encoder_len, heads)
        normed = self.cross_attn_norm.forward(h)
        weights = self.cross_attn.head_weights(normed, kv_cache[0], cross_blocks, encoder_len, heads)
        ttnn.deallocate(normed)
        return self._cross_and_ffn(h, kv_cache, cross), weights

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], cross: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        """``x``: the residual in ``decode.residual``; ``cross``: the cross page table and positions."""
        decode = self.decode
        h = _residual_decode(x, lambda t: self.self_attn.forward_decode(t, kv_cache, **attention_kwargs),
                             self.self_attn_norm, self.pre_norm, decode.attention_norm, decode)
        h = _residual_decode(h, lambda t: self.cross_attn.forward_decode(t, kv_cache, *cross), self.cross_attn_norm,
                             self.pre_norm, decode.attention_norm, decode)
        return _residual_decode(h, self.ffn.forward_decode, self.ffn_norm, self.pre_norm, decode.mlp_norm, decode)
