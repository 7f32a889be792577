"""Paged causal self-attention (decoder-only models and the decoder of encoder-decoder models).

Prefill writes K/V with ``paged_fill_cache`` and attends either its own fresh K/V (first chunk) or the
paged cache through ``chunked_scaled_dot_product_attention`` (a later chunk, a cached prefix). Decode
writes one token per user with ``paged_update_cache`` and attends with
``paged_scaled_dot_product_attention_decode``; users whose position is ``-1`` are neither written nor
attended. The call sequence follows tt_transformers' ``attention.py``.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.model_config import DecoderArgs
from tt_models.tt.rope import hf_to_meta_rows
from tt_models.tt.weights import as_bias, as_linear_weight

TILE = 32


class Attention:
    def __init__(self, args: DecoderArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 weight_dtype: Any) -> None:
        self.args = args
        self.device = device
        # float32-exact: ttnn's chunked SDPA binding rejects a Python float that float32 cannot hold.
        self.scale = float(torch.tensor(args.head_dim ** -0.5, dtype=torch.float32))
        nh, nkv = args.n_heads, args.n_kv_heads
        wq = hf_to_meta_rows(state[f"{prefix}q_proj.weight"], nh)
        wk = hf_to_meta_rows(state[f"{prefix}k_proj.weight"], nkv)
        wqkv = torch.cat([wq, wk, state[f"{prefix}v_proj.weight"]], dim=0)
        self.wqkv = as_linear_weight(wqkv, device, weight_dtype)
        self.bqkv = None
        if args.qkv_bias:
            bqkv = torch.cat([hf_to_meta_rows(state[f"{prefix}q_proj.bias"], nh),
                              hf_to_meta_rows(state[f"{prefix}k_proj.bias"], nkv), state[f"{prefix}v_proj.bias"]])
            self.bqkv = as_bias(bqkv, device)
        self.wo = as_linear_weight(state[f"{prefix}o_proj.weight"], device, weight_dtype)
        grid = device.compute_with_storage_grid_size()
        batch_cores = ttnn.num_cores_to_corerangeset(args.decode_rows, grid, row_wise=True)
        self.decode_heads_memory_config = ttnn.create_sharded_memory_config(
            (TILE, args.head_dim), batch_cores, ttnn.ShardStrategy.HEIGHT, ttnn.ShardOrientation.ROW_MAJOR,
            use_height_and_width_as_shard_shape=True)

    def forward_prefill(self, x: Any, rot: tuple[Any, Any], trans_mat: Any, kv_cache: tuple[Any, Any],
                        page_table: Any, fill_page_table: Any, chunk_start: int) -> Any:
        """One user's tokens ``x [1, 1, S, dim]`` at positions ``chunk_start ..``.

        ``fill_page_table`` ``[1, ceil(S / bs)]`` names the blocks of exactly these positions
        (``chunk_start`` is block-aligned); ``page_table`` ``[1, n]`` covers ``0 .. chunk_start + S``.
        """
        args = self.args
        k_cache, v_cache = kv_cache
        xqkv = ttnn.linear(x, self.wqkv, bias=self.bqkv)
        q, k, v = ttnn.experimental.nlp_create_qkv_heads(
            xqkv, num_heads=args.n_heads, num_kv_heads=args.n_kv_heads, transpose_k_heads=False)
        ttnn.deallocate(xqkv)
        cos, sin = rot
        q = ttnn.experimental.rotary_embedding_llama(q, cos, sin, trans_mat, is_decode_mode=False)
        k = ttnn.experimental.rotary_embedding_llama(k, cos, sin, trans_mat, is_decode_mode=False)
        k_fill = k if k.dtype == k_cache.dtype else ttnn.typecast(k, k_cache.dtype)
        v_fill = v if v.dtype == v_cache.dtype else ttnn.typecast(v, v_cache.dtype)
        ttnn.experimental.paged_fill_cache(k_cache, k_fill, fill_page_table, batch_idx=0)
        ttnn.experimental.paged_fill_cache(v_cache, v_fill, fill_page_table, batch_idx=0)
        if chunk_start == 0:
            attn = ttnn.transformer.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=self.scale, sliding_window_size=args.sliding_window)
        else:
            attn = ttnn.transformer.chunked_scaled_dot_product_attention(
                q, k_cache, v_cache, page_table, chunk_start, scale=self.scale,
                sliding_window_size=args.sliding_window)
        for t in (q, k, v, k_fill, v_fill):
            ttnn.deallocate(t)
        out = ttnn.experimental.nlp_concat_heads(attn)
        ttnn.deallocate(attn)
        return ttnn.linear(out, self.wo)

    def forward_decode(self, x: Any, rot: tuple[Any, Any], trans_mat: Any, kv_cache: tuple[Any, Any],
                       page_table: Any, current_pos: Any) -> Any:
        """One token per user: ``x [1, 1, 32, dim]``, ``current_pos`` int32 ``[32]`` (``-1``: padding row)."""
        args = self.args
        k_cache, v_cache = kv_cache
        xqkv = ttnn.linear(x, self.wqkv, bias=self.bqkv, memory_config=ttnn.L1_MEMORY_CONFIG)
        q, k, v = ttnn.experimental.nlp_create_qkv_heads_decode(
            xqkv, num_heads=args.n_heads, num_kv_heads=args.n_kv_heads,
            memory_config=ttnn.L1_HEIGHT_SHARDED_MEMORY_CONFIG)
        ttnn.deallocate(xqkv)
        cos, sin = rot
        q = ttnn.experimental.rotary_embedding_llama(q, cos, sin, trans_mat, is_decode_mode=True)
        k = ttnn.experimental.rotary_embedding_llama(k, cos, sin, trans_mat, is_decode_mode=True)
        ttnn.experimental.paged_update_cache(k_cache, k, update_idxs_tensor=current_pos, page_table=page_table)
        ttnn.experimental.paged_update_cache(v_cache, v, update_idxs_tensor=current_pos, page_table=page_table)
        attn = ttnn.transformer.paged_scaled_dot_product_attention_decode(
            q, k_cache, v_cache, page_table_tensor=page_table, cur_pos_tensor=current_pos, scale=self.scale,
            sliding_window_size=args.sliding_window, memory_config=ttnn.DRAM_MEMORY_CONFIG)
        for t in (q, k, v):
            ttnn.deallocate(t)
        attn_sharded = ttnn.interleaved_to_sharded(attn, self.decode_heads_memory_config)
        ttnn.deallocate(attn)
        out = ttnn.experimental.nlp_concat_heads_decode(attn_sharded, num_heads=args.n_heads)
        ttnn.deallocate(attn_sharded)
        out = ttnn.sharded_to_interleaved(out, ttnn.L1_MEMORY_CONFIG)
        return ttnn.linear(out, self.wo)
