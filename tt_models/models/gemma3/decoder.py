"""One Gemma 3 decoder layer: ``h = x + post_attn_norm(attn(input_norm(x)))``,
``out = h + post_ffn_norm(mlp(pre_ffn_norm(h)))``.

The attention is the shared paged block with Gemma's extras: Q/K RMSNorms per head before the rotary, the logits
scaled by ``query_pre_attn_scalar ** -0.5``, and on sliding layers the ``sliding_window`` (decode's and the causal
prefill's SDPA trim their reads to it). Every norm is Gemma's ``x / rms(x) * (1 + w)``: the weights are stored as
``1 + w``. The MLP is gated with GELU-tanh.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.attention import Attention
from tt_models.tt.decode_configs import DecodeConfigs, reshard
from tt_models.tt.mlp import MLP
from tt_models.tt.model_config import DecoderArgs, Precision
from tt_models.tt.norm import RMSNorm
from tt_models.tt.rope import hf_to_meta_rows
from tt_models.tt.tensor_parallel import fracture

SLIDING = "sliding_attention"


def gemma_norm(weight: torch.Tensor, eps: float, device: Any, *, fractured: bool = True) -> RMSNorm:
    """Gemma's RMSNorm, whose scale is ``1 + weight``."""
    return RMSNorm(1.0 + weight.float(), eps, device, fractured=fractured)


class Gemma3Block:
    def __init__(self, args: DecoderArgs, state: dict[str, torch.Tensor], layer: int, layer_type: str, device: Any,
                 precision: Precision, decode: DecodeConfigs, query_pre_attn_scalar: float) -> None:
        prefix = f"model.layers.{layer}."
        self.device, self.decode = device, decode
        eps = args.norm_eps
        self.input_norm = gemma_norm(state[f"{prefix}input_layernorm.weight"], eps, device)
        self.post_attention_norm = gemma_norm(state[f"{prefix}post_attention_layernorm.weight"], eps, device)
        self.pre_feedforward_norm = gemma_norm(state[f"{prefix}pre_feedforward_layernorm.weight"], eps, device)
        self.post_feedforward_norm = gemma_norm(state[f"{prefix}post_feedforward_layernorm.weight"], eps, device)
        attn = f"{prefix}self_attn."
        # The head norms' weights follow the Q/K rows into TT-NN's interleaved-pair order (one head's permutation).
        qk_norms = tuple(gemma_norm(hf_to_meta_rows(state[f"{attn}{name}.weight"], 1), eps, device, fractured=False)
                         for name in ("q_norm", "k_norm"))
        window = args.sliding_window if layer_type == SLIDING else None
        self.attention = Attention(replace(args, sliding_window=window), state, attn, device,
                                   precision.attention_weights, decode, scale=query_pre_attn_scalar ** -0.5,
                                   qk_norms=qk_norms)
        self.feed_forward = MLP(state, f"{prefix}mlp.", device, precision.mlp_weights, decode, activation="gelu_tanh")

    def forward_prefill(self, x: Any, kv_cache: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        normed = self.input_norm.forward(x)
        attn = self.attention.forward_prefill(normed, kv_cache=kv_cache, **attention_kwargs)
        ttnn.deallocate(normed)
        h = self._add_normed(x, attn, self.post_attention_norm)
        normed = self.pre_feedforward_norm.forward(h)
        ff = self.feed_forward.forward(normed)
        ttnn.deallocate(normed)
        out = self._add_normed(h, ff, self.post_feedforward_norm)
        ttnn.deallocate(h)
        return out

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        """``x``: the residual in ``decode.residual``; returns the next one there. The post norms run on the
        attention norm's sharded layout (the whole row, as the pre norms)."""
        decode = self.decode
        normed = self.input_norm.forward(x, decode.attention_norm)
        attn = reshard(self.attention.forward_decode(normed, kv_cache=kv_cache, **attention_kwargs), decode.residual)
        ttnn.deallocate(normed)
        h = self._add_normed(x, attn, self.post_attention_norm, decode)
        normed = self.pre_feedforward_norm.forward(h, decode.mlp_norm)
        ff = reshard(self.feed_forward.forward_decode(normed), decode.residual)
        ttnn.deallocate(normed)
        out = self._add_normed(h, ff, self.post_feedforward_norm, decode)
        ttnn.deallocate(h)
        return out

    def _add_normed(self, residual: Any, branch: Any, norm: RMSNorm, decode: DecodeConfigs | None = None) -> Any:
        """``residual + norm(branch)``, the normed branch fractured again over a mesh as the residual is (the norm
        gathers whole rows); in decode on the residual's layout."""
        whole = norm.forward(branch, None if decode is None else decode.attention_norm)
        ttnn.deallocate(branch)
        normed = fracture(whole, self.device)
        if decode is not None:
            normed = reshard(normed, decode.residual)
        if normed is not whole:
            ttnn.deallocate(whole)
        out = ttnn.add(residual, normed, memory_config=None if decode is None else decode.residual)
        ttnn.deallocate(normed)
        return out
