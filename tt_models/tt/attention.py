"""Paged causal self-attention (decoder-only models and the decoder of encoder-decoder models).

With ``rotary`` (Llama family) Q/K are rotated by ``rotary_embedding_llama``; without it (Whisper, BART:
learned positions) they are used as projected.

Prefill writes K/V with ``paged_fill_cache`` and attends either its own fresh K/V (first chunk) or the
paged cache through ``chunked_scaled_dot_product_attention`` (a later chunk, a cached prefix). Decode
writes one token per user with ``paged_update_cache`` and attends with
``paged_scaled_dot_product_attention_decode``; users whose position is ``-1`` are neither written nor
attended. The call sequence follows tt_transformers' ``attention.py``, decode's QKV and output matmuls on its
DRAM-sharded layouts when the block's :class:`DecodeConfigs` are sharded. On a mesh the heads split over the chips:
the QKV projection is column-parallel, each chip's cache holds its KV heads, the output projection is row-parallel
(replicated input, fractured output).

GPT-OSS's attention sinks (``{prefix}sinks``: a learned logit per query head in the softmax's denominator) go to the
SDPA ops' ``attention_sink``, whose kernels multiply it by the scale as they do the logits: it is stored divided by
the scale, ``[1, NH, 1, 1]`` for prefill and in column 0 of an ``[NH, 32]`` tile for decode (each chip its heads').
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs, user_cores
from tt_models.tt.linear import Linear
from tt_models.tt.rope import hf_to_meta_rows
from tt_models.tt.tensor_parallel import TILE, HeadSplit, by_chip, chips, select_heads, whole_tiles
from tt_models.tt.weights import as_tensor


def fused_qkv(state: dict[str, torch.Tensor], prefix: str, split: HeadSplit, head_dim: int,
              rotary: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ``[q; k; v]`` projection weight and bias (``None`` without biases; a missing one, such as Whisper's
    k_proj bias, is zero), each chip's heads (:class:`HeadSplit`) as one block, in chip order. Rotary models get
    Q/K rows in TT-NN's interleaved-pair order."""
    heads = {"q": split.n_heads, "k": split.n_kv_heads}

    def part(name: str, kind: str) -> torch.Tensor:
        t = state.get(f"{prefix}{name}_proj.{kind}")
        if t is None:
            t = torch.zeros(state[f"{prefix}{name}_proj.weight"].shape[0])
        return hf_to_meta_rows(t, heads[name]) if rotary and name in heads else t

    def chip_blocks(kind: str) -> torch.Tensor:
        q, k, v = (part(n, kind) for n in "qkv")
        return by_chip([torch.cat([select_heads(q, split.q_heads(c), head_dim),
                                   select_heads(k, split.kv_heads(c), head_dim),
                                   select_heads(v, split.kv_heads(c), head_dim)]) for c in range(split.chips)])

    has_bias = any(f"{prefix}{n}_proj.bias" in state for n in "qkv")
    return chip_blocks("weight"), chip_blocks("bias") if has_bias else None


def attention_sinks(sinks: torch.Tensor, split: HeadSplit, scale: float, device: Any) -> tuple[Any, Any]:
    """The prefill and decode ``attention_sink`` operands of HF's per-head ``sinks`` (zero for padding heads),
    divided by ``scale``, each chip's query heads as one block."""
    per_chip = by_chip([torch.stack([sinks[h] if h is not None else sinks.new_zeros(()) for h in split.q_heads(c)])
                        for c in range(split.chips)]).float() / scale
    prefill = as_tensor(per_chip.reshape(1, -1, 1, 1), device, shard_dim=1)
    decode = as_tensor(torch.nn.functional.pad(per_chip[:, None], (0, TILE - 1)), device, shard_dim=0)
    return prefill, decode


def output_projection(weight: torch.Tensor, split: HeadSplit, head_dim: int) -> torch.Tensor:
    """An HF output projection ``[dim, n_heads * head_dim]`` with each chip's query heads' columns as one block, in
    chip order (zero columns for padding heads): the row-parallel operand."""
    return by_chip([select_heads(weight, split.q_heads(c), head_dim, dim=1) for c in range(split.chips)], dim=1)


class Attention:
    def __init__(self, args: Any, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any,
                 decode: DecodeConfigs, *, rotary: bool = True, out_proj: str = "o_proj", scale: float | None = None,
                 qk_norms: tuple[Any, Any] | None = None) -> None:
        """``args``: ``n_heads``, ``n_kv_heads``, ``head_dim``, ``sliding_window``, ``decode_rows``. On a mesh each
        chip holds ``n_local_heads`` query and ``n_local_kv_heads`` KV heads (:class:`HeadSplit`). ``scale``: the
        logits' scale (default ``head_dim ** -0.5``; Gemma's ``query_pre_attn_scalar ** -0.5``); ``qk_norms``: norms
        of each Q and K head before the rotary (Gemma 3), their weights in the heads' row order."""
        self.args = args
        self.device = device
        self.rotary = rotary
        self.qk_norms = qk_norms
        split = HeadSplit.of(args.n_heads, args.n_kv_heads, chips(device))
        self.n_local_heads, self.n_local_kv_heads = split.q_per_chip, split.kv_per_chip
        # float32-exact: ttnn's chunked SDPA binding rejects a Python float that float32 cannot hold.
        self.scale = float(torch.tensor(args.head_dim ** -0.5 if scale is None else scale, dtype=torch.float32))
        sinks = state.get(f"{prefix}sinks")
        self.sinks = (None, None) if sinks is None else attention_sinks(sinks, split, self.scale, device)
        wqkv, bqkv = fused_qkv(state, prefix, split, args.head_dim, rotary)
        self.wqkv = Linear(wqkv, device, weight_dtype, bias=bqkv, layout=decode.qkv, parallel="column")
        self.wo = Linear(output_projection(state[f"{prefix}{out_proj}.weight"], split, args.head_dim), device,
                         weight_dtype, bias=state.get(f"{prefix}{out_proj}.bias"), layout=decode.wo, parallel="row")
        # Each user's Q (and K/V) heads on its own core, the cores of the rotary cos/sin, padded to whole tiles of
        # rows as nlp_create_qkv_heads_decode shards them: more than 32 heads a chip (GPT-OSS-20B's 64) make a taller
        # shard per user, not more shards than users' cores (tt_transformers' SCORES_BATCHED_MM_OUTPUT_MEMCFG).
        cores = user_cores(device, args.decode_rows)
        self.decode_q_memory_config, self.decode_kv_memory_config = (
            ttnn.create_sharded_memory_config((whole_tiles(heads), args.head_dim), cores,
                                              ttnn.ShardStrategy.HEIGHT, ttnn.ShardOrientation.ROW_MAJOR,
                                              use_height_and_width_as_shard_shape=True)
            for heads in (self.n_local_heads, self.n_local_kv_heads))

    def forward_prefill(self, x: Any, kv_cache: tuple[Any, Any], page_table: Any, fill_page_table: Any,
                        chunk_start: int, rot: tuple[Any, Any] | None = None, trans_mat: Any = None,
                        attn_mask: Any = None) -> Any:
        """One user's tokens ``x [1, 1, S, dim]`` at positions ``chunk_start ..``.

        ``fill_page_table`` ``[1, ceil(S / bs)]`` names the blocks of exactly these positions
        (``chunk_start`` is block-aligned); ``page_table`` ``[1, n]`` covers ``0 .. chunk_start + S``.
        ``attn_mask`` (first chunk only): an additive ``[1, 1, S, S]`` mask that replaces the causal (and sliding
        window) one, for attention patterns that are not causal (Gemma 3's bidirectional image tokens).
        """
        args = self.args
        k_cache, v_cache = kv_cache
        xqkv = self.wqkv.forward(x)
        q, k, v = ttnn.experimental.nlp_create_qkv_heads(
            xqkv, num_heads=self.n_local_heads, num_kv_heads=self.n_local_kv_heads, transpose_k_heads=False)
        ttnn.deallocate(xqkv)
        if self.qk_norms is not None:
            q, k = self._norm_heads(q, k, decode=False)
        if self.rotary:
            q = ttnn.experimental.rotary_embedding_llama(q, *rot, trans_mat, is_decode_mode=False)
            k = ttnn.experimental.rotary_embedding_llama(k, *rot, trans_mat, is_decode_mode=False)
        k_fill = k if k.dtype == k_cache.dtype else ttnn.typecast(k, k_cache.dtype)
        v_fill = v if v.dtype == v_cache.dtype else ttnn.typecast(v, v_cache.dtype)
        ttnn.experimental.paged_fill_cache(k_cache, k_fill, fill_page_table, batch_idx=0)
        ttnn.experimental.paged_fill_cache(v_cache, v_fill, fill_page_table, batch_idx=0)
        if attn_mask is not None:
            if chunk_start:
                raise ValueError("an attention mask is only taken by a prefill's first chunk")
            attn = ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=attn_mask,
                                                                scale=self.scale, attention_sink=self.sinks[0])
        elif chunk_start == 0:
            attn = ttnn.transformer.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=self.scale, sliding_window_size=args.sliding_window,
                attention_sink=self.sinks[0])
        else:
            attn = ttnn.transformer.chunked_scaled_dot_product_attention(
                q, k_cache, v_cache, page_table, chunk_start, scale=self.scale,
                sliding_window_size=args.sliding_window, attention_sink=self.sinks[0])
        for t in (q, k, v, k_fill, v_fill):
            ttnn.deallocate(t)
        out = ttnn.experimental.nlp_concat_heads(attn)
        ttnn.deallocate(attn)
        return self.wo.forward(out)

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], page_table: Any, current_pos: Any,
                       rot: tuple[Any, Any] | None = None, trans_mat: Any = None) -> Any:
        """One token per user: ``x [1, 1, 32, dim]``, ``current_pos`` int32 ``[32]`` (``-1``: padding row). The
        output is L1 width-sharded with sharded decode layouts."""
        args = self.args
        k_cache, v_cache = kv_cache
        xqkv = self.wqkv.forward_decode(x, memory_config=ttnn.L1_MEMORY_CONFIG)
        if xqkv.is_sharded():  # the head split reads an interleaved bfloat16 row block
            xqkv = ttnn.sharded_to_interleaved(xqkv, ttnn.L1_MEMORY_CONFIG)
        q, k, v = ttnn.experimental.nlp_create_qkv_heads_decode(
            xqkv, num_heads=self.n_local_heads, num_kv_heads=self.n_local_kv_heads,
            memory_config=self.decode_q_memory_config)
        ttnn.deallocate(xqkv)
        if self.qk_norms is not None:
            q, k = self._norm_heads(q, k, decode=True)
        if self.rotary:
            q = ttnn.experimental.rotary_embedding_llama(q, *rot, trans_mat, is_decode_mode=True)
            k = ttnn.experimental.rotary_embedding_llama(k, *rot, trans_mat, is_decode_mode=True)
        ttnn.experimental.paged_update_cache(k_cache, k, update_idxs_tensor=current_pos, page_table=page_table)
        ttnn.experimental.paged_update_cache(v_cache, v, update_idxs_tensor=current_pos, page_table=page_table)
        attn = ttnn.transformer.paged_scaled_dot_product_attention_decode(
            q, k_cache, v_cache, page_table_tensor=page_table, cur_pos_tensor=current_pos, scale=self.scale,
            sliding_window_size=args.sliding_window, attention_sink=self.sinks[1],
            memory_config=ttnn.DRAM_MEMORY_CONFIG)
        for t in (q, k, v):
            ttnn.deallocate(t)
        attn_sharded = ttnn.interleaved_to_sharded(attn, self.decode_q_memory_config)
        ttnn.deallocate(attn)
        # One head per core, width-sharded: the layout the DRAM-sharded output matmul reads (ATTN_OUTPUT_PROGCFG).
        out = ttnn.experimental.nlp_concat_heads_decode(attn_sharded, num_heads=self.n_local_heads)
        ttnn.deallocate(attn_sharded)
        if self.wo.layout is None:
            out = ttnn.sharded_to_interleaved(out, ttnn.L1_MEMORY_CONFIG)
        return self.wo.forward_decode(out)

    def _norm_heads(self, q: Any, k: Any, *, decode: bool) -> tuple[Any, Any]:
        """Q and K normed per head. Decode's heads are height-sharded one user per core, which the interleaved norm
        does not read: they are normed in L1 rows and sharded back for the rotary."""
        out = []
        for heads, norm, sharding in zip((q, k), self.qk_norms,
                                         (self.decode_q_memory_config, self.decode_kv_memory_config)):
            rows = ttnn.sharded_to_interleaved(heads, ttnn.L1_MEMORY_CONFIG) if decode else heads
            normed = norm.forward(rows)
            ttnn.deallocate(rows)
            if decode:
                ttnn.deallocate(heads)
                sharded = ttnn.interleaved_to_sharded(normed, sharding)
                ttnn.deallocate(normed)
                normed = sharded
            out.append(normed)
        return out[0], out[1]
