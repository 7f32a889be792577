"""A pre-norm decoder block: ``h = x + attn(norm(x))``, ``out = h + mlp(norm(h))`` (Llama, Qwen2, Qwen3, Mistral;
Qwen3 norms each Q and K head before the rotary; Qwen3-MoE's sparse layers and all of GPT-OSS's run a mixture of
experts as the MLP; GPT-OSS alternates sliding-window and full layers, ``layer_types``, and adds attention sinks).

In decode the residual stream stays in ``decode.residual`` (L1 width-sharded when sharded, as tt_transformers'
``DECODE_RESIDUAL_MEMCFG``): each norm reshards it onto the grid of the matmul it feeds and each sublayer's output
comes back to it before the add.
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
from tt_models.tt.moe import MoE
from tt_models.tt.norm import RMSNorm
from tt_models.tt.residual import pre_norm_residual
from tt_models.tt.rope import hf_to_meta_rows


def head_norms(state: dict[str, torch.Tensor], prefix: str, eps: float, device: Any) -> tuple[RMSNorm, RMSNorm] | None:
    """Qwen3's RMSNorms of each Q and K head before the rotary (None for a checkpoint without them). Their weights
    follow the Q/K rows into TT-NN's interleaved-pair order (one head's permutation)."""
    if f"{prefix}q_norm.weight" not in state:
        return None
    q, k = (RMSNorm(hf_to_meta_rows(state[f"{prefix}{name}.weight"], 1), eps, device, fractured=False)
            for name in ("q_norm", "k_norm"))
    return q, k


class TransformerBlock:
    def __init__(self, args: DecoderArgs, state: dict[str, torch.Tensor], layer: int, device: Any,
                 precision: Precision, decode: DecodeConfigs, layers_prefix: str = "model.layers.") -> None:
        prefix = f"{layers_prefix}{layer}."
        self.decode = decode
        self.attention_norm = RMSNorm(state[f"{prefix}input_layernorm.weight"], args.residual_norm_eps, device)
        attn = f"{prefix}self_attn."
        self.attention = Attention(replace(args, sliding_window=args.window(layer)), state, attn, device,
                                   precision.attention_weights, decode,
                                   qk_norms=head_norms(state, attn, args.norm_eps, device))
        self.ffn_norm = RMSNorm(state[f"{prefix}post_attention_layernorm.weight"], args.residual_norm_eps,
                                device)
        if args.experts is not None and layer in args.experts.sparse_layers:
            self.feed_forward = MoE(state, f"{prefix}mlp.", args.experts, device, precision.mlp_weights)
        else:
            self.feed_forward = MLP(state, f"{prefix}mlp.", device, precision.mlp_weights, decode)

    def forward_prefill(self, x: Any, kv_cache: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        h = pre_norm_residual(x, self.attention_norm,
                              lambda normed: self.attention.forward_prefill(normed, kv_cache=kv_cache,
                                                                            **attention_kwargs))
        out = pre_norm_residual(h, self.ffn_norm, self.feed_forward.forward)
        ttnn.deallocate(h)
        return out

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], **attention_kwargs: Any) -> Any:
        """``x``: the residual in ``decode.residual``; returns the next one there."""
        residual = self.decode.residual
        normed = self.attention_norm.forward(x, self.decode.attention_norm)
        attn = reshard(self.attention.forward_decode(normed, kv_cache=kv_cache, **attention_kwargs), residual)
        ttnn.deallocate(normed)
        h = ttnn.add(x, attn, memory_config=residual)
        ttnn.deallocate(attn)
        normed = self.ffn_norm.forward(h, self.decode.mlp_norm)
        ff = reshard(self.feed_forward.forward_decode(normed), residual)
        ttnn.deallocate(normed)
        out = ttnn.add(h, ff, memory_config=residual)
        ttnn.deallocate(h)
        ttnn.deallocate(ff)
        return out
