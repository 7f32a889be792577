"""Cross-attention over a paged cross KV cache (the core of encoder-decoder support).

The encoder states of a request are projected to K/V once, at prefill, and written with
``paged_fill_cache`` into the request's cross blocks (``cross_page_table``), from the same block pool as
the self-attention KV. Every read, at prefill and at decode, goes through
``paged_scaled_dot_product_attention_decode`` over the cross table, causal with
``cur_pos = encoder_len - 1``: that attends exactly the encoder positions, needs no mask, and skips
rows whose position is ``-1`` (decode padding). Prefill queries are handed to it as rows of at most
32 "users" sharing one cross table row. A row may attend a prefix of the encoder positions instead
(``cur_pos`` = its last visible position): Mllama's text rows see only their image's real tiles.

Decode's query and output projections use the decoder's DRAM-sharded layouts when it has them; the K/V
projection runs only on encoder states (prefill) and stays interleaved. On a mesh the heads split over the chips as
in self-attention: Q and K/V column-parallel, the cross cache holds each chip's KV heads, the output row-parallel.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs
from tt_models.tt.attention import output_projection
from tt_models.tt.linear import Linear
from tt_models.tt.norm import RMSNorm
from tt_models.tt.tensor_parallel import HeadSplit, by_chip, chips, select_heads
from tt_models.tt.weights import as_int_tensor

ROWS = 32  # query rows per decode-SDPA call


def cross_inputs(tables: torch.Tensor, positions: torch.Tensor, device: Any) -> tuple[list[Any], list[Any]]:
    """Cross page tables ``[R, W]`` and each row's last attended position (``-1``: none) as device tensors, per
    group of 32 query rows (the arguments of :meth:`CrossAttention.forward`)."""
    groups = range(0, tables.shape[0], ROWS)
    return ([as_int_tensor(tables[g: g + ROWS], device) for g in groups],
            [as_int_tensor(positions[g: g + ROWS], device) for g in groups])


class CrossAttention:
    """``args``: ``n_heads``, ``n_kv_heads`` (GQA), ``head_dim``. Biases are used where the checkpoint has them;
    ``qk_norm_eps`` adds the per-head RMSNorms of Q and K (``q_norm`` / ``k_norm``, Mllama)."""

    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any,
                 decode: DecodeConfigs, *, out_proj: str = "out_proj", qk_norm_eps: float | None = None) -> None:
        split = HeadSplit.of(args.n_heads, args.n_kv_heads, chips(device))
        self.n_heads, self.n_kv_heads, self.head_dim = split.q_per_chip, split.kv_per_chip, args.head_dim
        self.scale = float(torch.tensor(args.head_dim ** -0.5, dtype=torch.float32))

        def q_rows(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else by_chip([select_heads(t, split.q_heads(c), args.head_dim)
                                                   for c in range(split.chips)])

        self.wq = Linear(q_rows(state[f"{prefix}q_proj.weight"]), device, weight_dtype,
                         bias=q_rows(state.get(f"{prefix}q_proj.bias")), layout=decode.q, parallel="column")
        wk, wv = state[f"{prefix}k_proj.weight"], state[f"{prefix}v_proj.weight"]
        zeros = torch.zeros(wk.shape[0])  # Whisper's k_proj has no bias, its v_proj has one
        bk, bv = state.get(f"{prefix}k_proj.bias"), state.get(f"{prefix}v_proj.bias")
        has_bias = bk is not None or bv is not None
        bk, bv = zeros if bk is None else bk, zeros if bv is None else bv

        def kv_rows(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return by_chip([torch.cat([select_heads(t, split.kv_heads(c), args.head_dim) for t in (k, v)])
                            for c in range(split.chips)])

        self.wkv = Linear(kv_rows(wk, wv), device, weight_dtype, bias=kv_rows(bk, bv) if has_bias else None,
                          parallel="column")
        self.wo = Linear(output_projection(state[f"{prefix}{out_proj}.weight"], split, args.head_dim), device,
                         weight_dtype, bias=state.get(f"{prefix}{out_proj}.bias"), layout=decode.wo, parallel="row")
        self.q_norm = self.k_norm = None
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(state[f"{prefix}q_norm.weight"], qk_norm_eps, device, fractured=False)
            self.k_norm = RMSNorm(state[f"{prefix}k_norm.weight"], qk_norm_eps, device, fractured=False)

    def fill(self, encoder_states: Any, kv_cache: tuple[Any, Any], cross_page_table: Any) -> None:
        """Project ``encoder_states [1, 1, S_enc, dim]`` to K/V and write them to the cross blocks
        (``cross_page_table [1, ceil(S_enc / bs)]``)."""
        k_cache, v_cache = kv_cache
        length, heads, dim = encoder_states.shape[2], self.n_kv_heads, self.head_dim
        kv = self.wkv.forward(encoder_states)
        kv = ttnn.permute(ttnn.reshape(kv, (1, length, 2 * heads, dim)), (0, 2, 1, 3))
        for cache, first in ((k_cache, 0), (v_cache, heads)):
            part = ttnn.slice(kv, (0, first, 0, 0), (1, first + heads, length, dim))
            if first == 0 and self.k_norm is not None:
                normed = self.k_norm.forward(part)
                ttnn.deallocate(part)
                part = normed
            if part.dtype != cache.dtype:
                part = ttnn.typecast(part, cache.dtype)
            ttnn.experimental.paged_fill_cache(cache, part, cross_page_table, batch_idx=0)
            ttnn.deallocate(part)
        ttnn.deallocate(kv)

    def head_weights(self, x: Any, k_cache: Any, cross_blocks: list[int], encoder_len: int,
                     heads: list[int]) -> Any:
        """The attention probabilities ``softmax(Q Kᵀ · scale)`` of ``heads`` only: ``x [1, 1, R, dim]`` (the
        sublayer's normed input) against the keys of the encoder positions ``0 .. encoder_len - 1`` in the cross
        blocks ``cross_blocks`` (in order) -> float32 ``[1, len(heads), R, encoder_len]``, on the device.

        The keys are read from the cross blocks, which hold them already (one slice per block): recomputing them
        would need the encoder states, dropped after prefill. Scores and softmax are float32, as HF's eager
        attention weights are (on a card: a float32 matmul output with fp32 accumulation)."""
        rows, n_heads, dim = x.shape[2], self.n_heads, self.head_dim
        q = ttnn.permute(ttnn.reshape(self.wq.forward(x), (1, rows, n_heads, dim)), (0, 2, 1, 3))  # [1, H, R, dim]
        if self.q_norm is not None:
            q = self.q_norm.forward(q)
        block_size = k_cache.shape[2]
        kv_heads, group = self.n_kv_heads, n_heads // self.n_kv_heads
        keys = ttnn.concat([ttnn.slice(k_cache, (b, 0, 0, 0), (b + 1, kv_heads, block_size, dim))
                            for b in cross_blocks], dim=2)  # [1, KV heads, blocks * block_size, dim]
        q = ttnn.concat([ttnn.slice(q, (0, h, 0, 0), (1, h + 1, rows, dim)) for h in heads], dim=1)
        keys = ttnn.concat([ttnn.slice(keys, (0, h // group, 0, 0), (1, h // group + 1, encoder_len, dim))
                            for h in heads], dim=1)
        scores = ttnn.multiply(ttnn.matmul(q, keys, transpose_b=True, dtype=ttnn.float32), self.scale)
        for t in (q, keys):
            ttnn.deallocate(t)
        return ttnn.softmax(scores, dim=-1)

    def forward(self, x: Any, kv_cache: tuple[Any, Any], cross_page_tables: list[Any],
                cross_positions: list[Any]) -> Any:
        """``x [1, 1, R, dim]``; per group of 32 rows, the cross table rows and ``encoder_len - 1`` (or -1)."""
        return self.wo.forward(self._attend(self.wq.forward(x), kv_cache, cross_page_tables, cross_positions))

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], cross_page_table: Any, cross_position: Any) -> Any:
        """One tile of users (L1 width-sharded out with sharded layouts)."""
        q = self.wq.forward_decode(x)
        if q.is_sharded():
            q = ttnn.sharded_to_interleaved(q, ttnn.DRAM_MEMORY_CONFIG)
        return self.wo.forward_decode(self._attend(q, kv_cache, [cross_page_table], [cross_position]))

    def _attend(self, q: Any, kv_cache: tuple[Any, Any], cross_page_tables: list[Any],
                cross_positions: list[Any]) -> Any:
        """Queries ``[1, 1, R, heads * dim]`` -> attention output in the same shape."""
        rows, heads, dim = q.shape[2], self.n_heads, self.head_dim
        outputs = []
        for group, (table, positions) in enumerate(zip(cross_page_tables, cross_positions)):
            start, end = group * ROWS, min(rows, (group + 1) * ROWS)
            q_rows = q if len(cross_page_tables) == 1 else ttnn.slice(q, (0, 0, start, 0), (1, 1, end, heads * dim))
            q_rows = ttnn.reshape(q_rows, (1, end - start, heads, dim))
            if self.q_norm is not None:
                q_rows = self.q_norm.forward(q_rows)
            attn = ttnn.transformer.paged_scaled_dot_product_attention_decode(
                q_rows, kv_cache[0], kv_cache[1], page_table_tensor=table, cur_pos_tensor=positions,
                scale=self.scale, memory_config=ttnn.DRAM_MEMORY_CONFIG)
            outputs.append(ttnn.reshape(attn, (1, 1, end - start, heads * dim)))
        return outputs[0] if len(outputs) == 1 else ttnn.concat(outputs, dim=2)
