"""Bidirectional self-attention of an encoder: each batch row one sequence, no KV cache (heads split over a mesh's chips
as in :class:`~tt_models.tt.attention.Attention`). With ``rotary`` (the Qwen-VL and Pixtral vision towers) Q/K are
rotated by ``rotary_embedding_llama`` with the cos/sin the caller gives per token.

TT-NN's head ops and SDPA take heads of whole 32-wide tiles; the real vision towers' are not (SigLIP-so400m's and
Qwen3-VL's 72, Qwen2.5-VL's and Llama 3.2 Vision's 80). Such heads are zero-padded to whole tiles at load, head by head
(so a mesh's head split is unchanged), as tt-metal's vision attention pads them: the logits keep the real head_dim's
scale, and the result is exactly the unpadded one (:func:`padded_heads`, :func:`rotation`)."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.attention import fused_qkv, output_projection
from tt_models.tt.linear import Linear
from tt_models.tt.tensor_parallel import HeadSplit, chips, whole_tiles
from tt_models.tt.weights import as_tensor


def rotation(cos: torch.Tensor, sin: torch.Tensor, device: Any) -> tuple[Any, Any]:
    """A rotary's cos/sin ``[S, head_dim]`` (host, interleaved pairs) as the ``rot`` pair
    :meth:`EncoderAttention.forward` takes, padded to the tiled head with the identity rotation (cos 1, sin 0): the
    padded pairs come last in each head (:func:`padded_heads`) and hold zeros."""
    pad = whole_tiles(cos.shape[-1]) - cos.shape[-1]
    cos, sin = (torch.nn.functional.pad(t, (0, pad), value=value) for t, value in ((cos, 1.0), (sin, 0.0)))
    return as_tensor(cos[None, None], device), as_tensor(sin[None, None], device)


def padded_heads(state: dict[str, torch.Tensor], prefix: str, n_heads: int, head_dim: int, out_proj: str,
                 rotary: bool) -> dict[str, torch.Tensor]:
    """HF's ``q_proj`` / ``k_proj`` / ``v_proj`` (weights and biases) and ``out_proj`` weight with each head
    zero-padded from ``head_dim`` to :func:`~tt_models.tt.tensor_parallel.whole_tiles` width. Padded Q/K columns add nothing to the logits, padded V
    columns come out zero and meet zero input rows of the output projection, so the attention is unchanged. Rotary
    Q/K are in HF's rotate-half layout (``i`` turns with ``i + head_dim / 2``): each half is padded to half the tiled
    width, so that the pairs stay aligned and, once interleaved (:func:`~tt_models.tt.rope.hf_to_meta_rows`), the
    padding is the head's last pairs."""
    pad = whole_tiles(head_dim) - head_dim
    if not pad:
        return state
    out = dict(state)
    for name in ("q", "k", "v"):
        halves = 2 if rotary and name != "v" else 1
        for kind in ("weight", "bias"):
            key = f"{prefix}{name}_proj.{kind}"
            if key in state:
                t = state[key]
                heads = t.reshape(n_heads, halves, head_dim // halves, -1)
                out[key] = torch.nn.functional.pad(heads, (0, 0, 0, pad // halves)).reshape(-1, *t.shape[1:])
    weight = state[f"{prefix}{out_proj}.weight"]
    out[f"{prefix}{out_proj}.weight"] = torch.nn.functional.pad(weight.reshape(len(weight), n_heads, head_dim),
                                                                (0, pad)).reshape(len(weight), -1)
    return out


class EncoderAttention:
    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any, *,
                 out_proj: str = "out_proj", rotary: bool = False) -> None:
        """``args``: ``n_heads`` and the real ``head_dim`` (any even width; run at :func:`~tt_models.tt.tensor_parallel.whole_tiles` width)."""
        split = HeadSplit.of(args.n_heads, args.n_heads, chips(device))
        self.n_local_heads = split.q_per_chip
        self.scale = args.head_dim ** -0.5
        state = padded_heads(state, prefix, args.n_heads, args.head_dim, out_proj, rotary)
        head_dim = whole_tiles(args.head_dim)
        wqkv, bqkv = fused_qkv(state, prefix, split, head_dim, rotary=rotary)
        self.wqkv = Linear(wqkv, device, weight_dtype, bias=bqkv, parallel="column")
        self.wo = Linear(output_projection(state[f"{prefix}{out_proj}.weight"], split, head_dim), device,
                         weight_dtype, bias=state.get(f"{prefix}{out_proj}.bias"), parallel="row")

    def forward(self, x: Any, attn_mask: Any = None, rot: tuple[Any, Any] | None = None, trans_mat: Any = None) -> Any:
        """``x [B, 1, S, dim]``: B sequences, each attending only itself (Gemma 3's batched images; the other
        towers run one); keys past the logical ``S`` (tile padding) are masked by the op itself, others by the
        additive ``attn_mask [1, 1, S, S]`` if given. ``rot``: :func:`rotation`'s cos/sin (rotary only)."""
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
