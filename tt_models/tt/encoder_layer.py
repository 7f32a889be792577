"""The pre-norm layer of the vision towers (Qwen2.5-VL's and Qwen3-VL's blocks, Pixtral's and SigLIP's layers):
``h = x + attn(attention_norm(x))``, ``out = h + mlp(mlp_norm(h))``. A family builds it from its own norms
(RMSNorm or LayerNorm), :class:`~tt_models.tt.encoder_attention.EncoderAttention` and MLP (gated or not)."""

from __future__ import annotations

from typing import Any

from tt_models.runtime import ttnn
from tt_models.tt.encoder_attention import EncoderAttention
from tt_models.tt.residual import pre_norm_residual


class EncoderLayer:
    def __init__(self, attention_norm: Any, attention: EncoderAttention, mlp_norm: Any, mlp: Any) -> None:
        self.attention_norm, self.attention, self.mlp_norm, self.mlp = attention_norm, attention, mlp_norm, mlp

    def forward(self, x: Any, mask: Any = None, rot: tuple[Any, Any] | None = None, trans_mat: Any = None) -> Any:
        """``x [B, 1, S, dim]`` (fractured over a mesh); ``mask``, ``rot``, ``trans_mat`` as
        :meth:`EncoderAttention.forward` takes them. ``x`` is kept."""
        h = pre_norm_residual(x, self.attention_norm, lambda normed: self.attention.forward(normed, mask, rot,
                                                                                            trans_mat))
        out = pre_norm_residual(h, self.mlp_norm, self.mlp.forward)
        ttnn.deallocate(h)
        return out
