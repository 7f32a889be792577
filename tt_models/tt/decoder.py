"""A pre-norm decoder block: ``h = x + attn(norm(x))``, ``out = h + mlp(norm(h))``."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.attention import Attention
from tt_models.tt.mlp import MLP
from tt_models.tt.model_config import DecoderArgs, Precision
from tt_models.tt.norm import RMSNorm


class TransformerBlock:
    def __init__(self, args: DecoderArgs, state: dict[str, torch.Tensor], layer: int, device: Any,
                 precision: Precision, layers_prefix: str = "model.layers.") -> None:
        prefix = f"{layers_prefix}{layer}."
        self.attention_norm = RMSNorm(state[f"{prefix}input_layernorm.weight"], args.norm_eps, device)
        self.attention = Attention(args, state, f"{prefix}self_attn.", device, precision.attention_weights)
        self.ffn_norm = RMSNorm(state[f"{prefix}post_attention_layernorm.weight"], args.norm_eps, device)
        self.feed_forward = MLP(state, f"{prefix}mlp.", device, precision.mlp_weights)

    def _residual(self, x: Any, attn_out: Any) -> Any:
        h = ttnn.add(x, attn_out)
        ttnn.deallocate(attn_out)
        normed = self.ffn_norm.forward(h)
        ff = self.feed_forward.forward(normed)
        ttnn.deallocate(normed)
        out = ttnn.add(h, ff)
        ttnn.deallocate(h)
        ttnn.deallocate(ff)
        return out

    def forward_prefill(self, x: Any, kv_cache: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        normed = self.attention_norm.forward(x)
        attn = self.attention.forward_prefill(normed, kv_cache=kv_cache, **attention_kwargs)
        ttnn.deallocate(normed)
        return self._residual(x, attn)

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        normed = self.attention_norm.forward(x)
        attn = self.attention.forward_decode(normed, kv_cache=kv_cache, **attention_kwargs)
        ttnn.deallocate(normed)
        return self._residual(x, attn)
