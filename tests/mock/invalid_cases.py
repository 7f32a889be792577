"""Invalid op calls (see ``tests.mock.cases``): each builds valid inputs and returns the rejected call, which the real
ttnn and the host backend must both reject by the check its ``@rejected`` names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tests.mock.cases import (B, NH, NKV, decode_heads, ints, kv_cache, page_table, rand, rot_trans_mat, sdpa_config,
                              tile, user_sharded)


# --- invalid calls ------------------------------------------------------------------------------------------
# Each builds valid inputs and returns the rejected call. ``@rejected`` says which check must reject it, on each
# backend: side by side, the host message and the real condition name the same violated condition.

@dataclass(frozen=True)
class Rejection:
    """The check that rejects an invalid call.

    ``op`` and ``host``: the host raises ``TTFatal(f"{op}: <message>")`` with ``host`` (a regex) matching the
    message from its start. ``real``: literal text of the real ``TT_FATAL``, before its backtrace: the C++
    condition that failed (for a ``TT_THROW``, whose condition says nothing, its message).
    """

    op: str
    host: str
    real: str


def rejected(op: str, host: str, real: str) -> Callable[[Callable], Callable]:
    def mark(case: Callable) -> Callable:
        case.rejection = Rejection(op, host, real)
        return case
    return mark


PAGED_DECODE = "paged_scaled_dot_product_attention_decode"


def _fill_args(ttnn, device, cache_dtype=None, input_dtype=None, seq=64, users=4, blocks=2):
    cache = kv_cache(ttnn, device, 16, 32, 64, cache_dtype or ttnn.bfloat16)
    k = tile(ttnn, device, rand(1, NKV, seq, 64), input_dtype or cache_dtype)
    return cache, k, page_table(ttnn, device, users, blocks)


def _update_args(ttnn, device):
    return (kv_cache(ttnn, device, B * 4, 32, 64), decode_heads(ttnn, device, B, NKV, 64),
            ints(ttnn, device, list(range(B))), page_table(ttnn, device, B, 4))


def _decode_args(ttnn, device):
    keys, values = (kv_cache(ttnn, device, B * 4, 32, 64, seed=s) for s in (1, 2))
    return tile(ttnn, device, rand(1, B, NH, 64)), keys, values, page_table(ttnn, device, B, 4)


def _decode_call(ttnn, q, keys, values, table, **kwargs):
    return lambda: ttnn.transformer.paged_scaled_dot_product_attention_decode(q, keys, values,
                                                                              page_table_tensor=table, **kwargs)


@rejected("paged_fill_cache", r"Input tensor dtype \(BFLOAT16\) must match cache tensor dtype \(BFLOAT8_B\)",
          "input_tensor.dtype() == cache_tensor.dtype()")
def fill_cache_dtype_mismatch(ttnn, device):  # bf16 K into a bfp8 cache without the typecast
    cache, k, table = _fill_args(ttnn, device, ttnn.bfloat8_b, ttnn.bfloat16)
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=0)


@rejected("paged_fill_cache", r"Input seq_len \(96\) must fit in max_num_blocks_per_seq \(2\) \* block_size \(32\)",
          "input_shape[2] <= effective_block_size * page_table_shape[1]")
def fill_cache_seq_too_long(ttnn, device):  # 96 tokens, 2 blocks of 32
    cache, k, table = _fill_args(ttnn, device, seq=96)
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=0)


@rejected("paged_fill_cache", r"Batch idx must be within the page_table batch size",
          "args.batch_idx_fallback < page_table_shape[0]")
def fill_cache_batch_idx_out_of_range(ttnn, device):  # the page table has 4 rows
    cache, k, table = _fill_args(ttnn, device)
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=4)


@rejected("paged_fill_cache",
          r"paged_fill_cache geometry mismatch: cache has 4096 elems/block .* view is 8192 .*head_dim=128",
          "view_elems_per_block == cache_elems_per_block")
def fill_cache_head_dim_mismatch(ttnn, device):
    cache, _, table = _fill_args(ttnn, device)
    k = tile(ttnn, device, rand(1, NKV, 64, 128))
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=0)


@rejected("paged_fill_cache", r"input batch 2 > 1 needs batch_idx_tensor", "input_batch == 1")
def fill_cache_batch_without_idx_tensor(ttnn, device):  # 2 sequences need batch_idx_tensor
    cache, _, table = _fill_args(ttnn, device)
    k = tile(ttnn, device, rand(2, NKV, 64, 64))
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=1)


@rejected("paged_update_cache", r"Expect input_tensor to be sharded", "input_tensor.is_sharded()")
def update_cache_unsharded_input(ttnn, device):
    cache, _, pos, table = _update_args(ttnn, device)
    k = tile(ttnn, device, rand(1, B, NKV, 64))
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Number of update_idxs \(9\) should match batch size \(8\)",
          "input_tensor.padded_shape()[1] == num_indices")
def update_cache_idxs_count(ttnn, device):  # 9 positions for 8 users
    cache, k, _, table = _update_args(ttnn, device)
    pos = ints(ttnn, device, list(range(9)))
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Expect page table to have datatype INT32, got UINT32",
          "page_table_val.dtype() == DataType::INT32")
def update_cache_page_table_not_int32(ttnn, device):
    cache, k, pos, _ = _update_args(ttnn, device)
    table = page_table(ttnn, device, B, 4, ttnn.uint32)
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Expected update_idxs to have datatype INT32",
          "update_idxs_tensor_val.dtype() == DataType::INT32")
def update_cache_idxs_not_int32(ttnn, device):
    cache, k, _, table = _update_args(ttnn, device)
    pos = ints(ttnn, device, list(range(B)), ttnn.uint32)
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Data type of input tensor for update cache must be FLOAT32 or BFLOAT16",
          "input_tensor.dtype() == DataType::FLOAT32 || input_tensor.dtype() == DataType::BFLOAT16")
def update_cache_bfp8_input(ttnn, device):  # the input must stay bf16/fp32, the op packs it
    cache, _, pos, table = _update_args(ttnn, device)
    k = decode_heads(ttnn, device, B, NKV, 64, dtype=ttnn.bfloat8_b)
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_fused_update_cache", r"input_tensor1 and input_tensor2 must not have overlapping shard grids",
          "!is_overlap")
def fused_update_overlapping_inputs(ttnn, device):  # K and V shards on the same cores
    keys, k, pos, table = _update_args(ttnn, device)
    values = kv_cache(ttnn, device, B * 4, 32, 64)
    return lambda: ttnn.experimental.paged_fused_update_cache(keys, k, values, k, update_idxs_tensor=pos,
                                                              page_table=table)


@rejected(PAGED_DECODE, r"Must have cur_pos tensor for paged attention in causal mode",
          "tensor_args.cur_pos_tensor.has_value()")
def decode_causal_without_cur_pos(ttnn, device):  # paged causal decode reads positions from a tensor
    return _decode_call(ttnn, *_decode_args(ttnn, device))


@rejected(PAGED_DECODE, r"cur_pos must have batch size equal to Q, got 9 and 8", "cur_pos_shape[-1] == B")
def decode_cur_pos_batch(ttnn, device):  # 9 positions for a Q batch of 8
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, list(range(9))))


@rejected(PAGED_DECODE, r"cur_pos must have batch size equal to Q, got 8 and 4", "cur_pos_shape[-1] == B")
def decode_page_table_batch(ttnn, device):
    """Page table rows for 4 users, Q and cur_pos for 8. The real op takes its batch B from the page table and
    rejects cur_pos (it never compares Q with the page table: with cur_pos for 4 users it accepts this Q)."""
    q, keys, values, _ = _decode_args(ttnn, device)
    table, pos = page_table(ttnn, device, 4, 4), ints(ttnn, device, [0] * B)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=pos)


@rejected(PAGED_DECODE, r"Must not have attn_mask tensor for causal attention", "not tensor_args.attn_mask.has_value()")
def decode_mask_with_causal(ttnn, device):
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B),
                        attn_mask=tile(ttnn, device, torch.zeros(1, B, NH, 128)))


@rejected(PAGED_DECODE, r"Mask sequence length must be multiple of chunk size, got: 128 and 256",
          "mask_shape[3] % operation_attributes.k_chunk_size == 0")
def decode_non_causal_k_chunk(ttnn, device):  # k_chunk 256 does not divide the 4 x 32 paged length
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, is_causal=False,
                        attn_mask=tile(ttnn, device, torch.zeros(1, B, NH, 128)),
                        program_config=sdpa_config(ttnn, device, 32, 256))


@rejected(PAGED_DECODE, r"Sharded output not supported for GQA", "!operation_attributes.output_mem_config.is_sharded()")
def decode_gqa_sharded_output(ttnn, device):
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B),
                        memory_config=user_sharded(ttnn, device, B, 32, 64))


@rejected(PAGED_DECODE, r"Unsupported data type FLOAT32\.",
          "input_tensor.dtype() == DataType::BFLOAT16 || input_tensor.dtype() == DataType::BFLOAT8_B")
def decode_fp32_q(ttnn, device):
    _, keys, values, table = _decode_args(ttnn, device)
    q = tile(ttnn, device, rand(1, B, NH, 64), ttnn.float32)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B))


@rejected(PAGED_DECODE, r"Unsupported data type FLOAT32\.",
          "input_tensor.dtype() == DataType::BFLOAT16 || input_tensor.dtype() == DataType::BFLOAT8_B")
def decode_fp32_cache(ttnn, device):  # a float32 KV cache cannot be read by SDPA decode (bf16 / bfp8 / bfp4)
    q, _, _, table = _decode_args(ttnn, device)
    keys, values = (kv_cache(ttnn, device, B * 4, 32, 64, ttnn.float32, seed=s) for s in (1, 2))
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B))


@rejected("scaled_dot_product_attention_decode", r"K sequence length must be multiple of chunk size, got: 384 and 256",
          "k_shape[2] % operation_attributes.k_chunk_size == 0")
def unpaged_decode_k_chunk(ttnn, device):  # k_chunk 256 does not divide S = 384
    keys, values = (tile(ttnn, device, rand(4, NKV, 384, 64, seed=s)) for s in (1, 2))
    q, pos = tile(ttnn, device, rand(1, 4, NH, 64)), ints(ttnn, device, [0, 1, 2, 3])
    return lambda: ttnn.transformer.scaled_dot_product_attention_decode(
        q, keys, values, cur_pos_tensor=pos, program_config=sdpa_config(ttnn, device, 32, 256))


@rejected("linear", r"inner dims differ: input_tensor_a \[1, 1, 32, 64\] has K=64, input_tensor_b \[96, 128\] has K=96",
          "a_shape[-1] == b_shape[-2]")
def linear_inner_dims(ttnn, device):
    x, w = tile(ttnn, device, rand(1, 1, 32, 64)), tile(ttnn, device, rand(96, 128))
    return lambda: ttnn.linear(x, w)


@rejected("matmul",
          r"inner dims differ: input_tensor_a \[1, 8, 32, 64\] has K=64, input_tensor_b \[1, 8, 32, 64\] has K=32",
          "a_shape[-1] == b_shape[-2]")
def matmul_inner_dims(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 8, 32, 64)), tile(ttnn, device, rand(1, 8, 32, 64))
    return lambda: ttnn.matmul(a, b)


@rejected("scaled_dot_product_attention",
          r"Causal SDPA requires Q and K to have the same sequence length, got 64 and 128",
          "Sq == Sk")
def sdpa_causal_sq_ne_sk(ttnn, device):
    q = tile(ttnn, device, rand(1, NH, 64, 64))
    k, v = (tile(ttnn, device, rand(1, NKV, 128, 64, seed=s)) for s in (1, 2))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True)


@rejected("scaled_dot_product_attention", r"Unsupported data type FLOAT32",
          "input_tensor->dtype() == DataType::BFLOAT16 || input_tensor->dtype() == DataType::BFLOAT8_B")
def sdpa_fp32_operands(ttnn, device):  # no float32 attention on TT-NN, prefill included
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s), ttnn.float32) for s in range(3))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False)


@rejected("scaled_dot_product_attention", r"attn_mask must be None when is_causal is True",
          "!(attrs.is_causal && tensors.attn_mask.has_value())")
def sdpa_mask_with_causal(ttnn, device):
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s)) for s in range(3))
    mask = tile(ttnn, device, torch.zeros(1, 1, 64, 64))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True, attn_mask=mask)


@rejected("scaled_dot_product_attention", r"attn_mask cannot be combined with sliding_window_size",
          "!(attrs.sliding_window_size.value_or(0) > 0 && tensors.attn_mask.has_value())")
def sdpa_mask_with_window(ttnn, device):
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s)) for s in range(3))
    mask = tile(ttnn, device, torch.zeros(1, 1, 64, 64))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=mask,
                                                                 sliding_window_size=32)


@rejected("scaled_dot_product_attention", r"Mask num_heads must either be 1 .* or must match Q heads dimension",
          "mask_shape[1] == 1 || mask_shape[1] == q_shape[1]")
def sdpa_mask_heads(ttnn, device):  # a mask has 1 or NQH heads
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s)) for s in range(3))
    mask = tile(ttnn, device, torch.zeros(1, 2, 64, 64))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=mask)


@rejected("scaled_dot_product_attention", r"GQA expects Q to have a multiple of K heads, but got 8 and 3",
          "nkv > 0 && nqh >= nkv && nqh % nkv == 0")
def sdpa_heads_not_divisible(ttnn, device):  # 8 Q heads over 3 KV heads
    q = tile(ttnn, device, rand(1, NH, 64, 64))
    k, v = (tile(ttnn, device, rand(1, 3, 64, 64, seed=s)) for s in (1, 2))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True)


@rejected("chunked_scaled_dot_product_attention",
          r"kv_len 128 \(page table blocks \* block_size\) must be >= chunk_start_idx \+ Sq \(160\)",
          "kv_length >= q_shape[2] + attrs.chunk_start_idx.value()")
def chunked_sdpa_past_page_table(ttnn, device):  # chunk [96, 160) but the table covers 128 tokens
    keys, values = (kv_cache(ttnn, device, 8, 32, 64, seed=s) for s in (1, 2))
    q, table = tile(ttnn, device, rand(1, NH, 64, 64)), page_table(ttnn, device, 1, 4)
    return lambda: ttnn.transformer.chunked_scaled_dot_product_attention(q, keys, values, table, 96)


@rejected("chunked_scaled_dot_product_attention", r"chunk_start_idx \(32\) must be a multiple of q_chunk_size \(64\)",
          "attrs.chunk_start_idx.value() % q_chunk_size == 0")
def chunked_sdpa_start_not_chunk_multiple(ttnn, device):  # start 32 with 64-token q/k chunks
    keys, values = (kv_cache(ttnn, device, 8, 32, 64, seed=s) for s in (1, 2))
    q, table = tile(ttnn, device, rand(1, NH, 64, 64)), page_table(ttnn, device, 1, 4)
    return lambda: ttnn.transformer.chunked_scaled_dot_product_attention(
        q, keys, values, table, 32, program_config=sdpa_config(ttnn, device, 64, 64))


@rejected("rotary_embedding_llama", r"input must be BFLOAT16, got BFLOAT8_B",
          "input_tensor.dtype() == cos.dtype() && cos.dtype() == sin.dtype()")
def rotary_bfp8_input(ttnn, device):
    x = tile(ttnn, device, rand(1, NH, 128, 64), ttnn.bfloat8_b)
    cos, sin = tile(ttnn, device, rand(1, 1, 128, 64, seed=1)), tile(ttnn, device, rand(1, 1, 128, 64, seed=2))
    trans = rot_trans_mat(ttnn, device)
    return lambda: ttnn.experimental.rotary_embedding_llama(x, cos, sin, trans, is_decode_mode=False)


@rejected("rotary_embedding_llama", r"decode mode needs a height-sharded input",
          "input_tensor.memory_config().memory_layout() == TensorMemoryLayout::HEIGHT_SHARDED")
def rotary_decode_interleaved(ttnn, device):  # decode mode needs height-sharded inputs
    x = tile(ttnn, device, rand(1, B, NH, 64))
    cos, sin = tile(ttnn, device, rand(1, B, 1, 64, seed=1)), tile(ttnn, device, rand(1, B, 1, 64, seed=2))
    trans = rot_trans_mat(ttnn, device)
    return lambda: ttnn.experimental.rotary_embedding_llama(x, cos, sin, trans, is_decode_mode=True)


@rejected("nlp_create_qkv_heads", r"input width 700 is not \(num_heads \+ 2 \* num_kv_heads\) \* head_dim",
          "input_tensor_q.padded_shape()[3] % (num_q_heads + 2 * num_kv_heads_val) == 0")
def create_qkv_heads_bad_width(ttnn, device):  # 8 + 2*2 heads of 64 need width 768
    fused = tile(ttnn, device, rand(1, 1, 128, 700))
    return lambda: ttnn.experimental.nlp_create_qkv_heads(fused, num_heads=NH, num_kv_heads=NKV,
                                                          transpose_k_heads=False)


@rejected("fill_cache", r"batch_idx 4 is outside the cache batch 4", "args.batch_idx < cache_tensor.padded_shape()[0]")
def fill_cache_batch_out_of_range(ttnn, device):  # non-paged fill_cache, the cache holds 4 users
    cache, k = kv_cache(ttnn, device, 4, 128, 64), tile(ttnn, device, rand(1, NKV, 64, 64))
    return lambda: ttnn.fill_cache(cache, k, 4)


@rejected("from_torch", r"BFLOAT8_B is a tile format: it needs layout=TILE_LAYOUT", "layout == Layout::TILE")
def bfp8_row_major(ttnn, device):  # block floats exist only as tiles
    return lambda: ttnn.from_torch(rand(1, 1, 32, 64), dtype=ttnn.bfloat8_b, layout=ttnn.ROW_MAJOR_LAYOUT,
                                   device=device)


@rejected("typecast", r"typecast to BFLOAT8_B needs a TILE tensor", "layout == Layout::TILE")
def typecast_row_major_to_bfp8(ttnn, device):
    x = ttnn.from_torch(rand(1, 1, 32, 64), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    return lambda: ttnn.typecast(x, ttnn.bfloat8_b)


@rejected("concat", r"all inputs must have the same dtype and layout", "in_ref.dtype() == first_input.dtype()")
def concat_mixed_dtypes(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 1, 32, 64)), tile(ttnn, device, rand(1, 1, 32, 64), ttnn.bfloat8_b)
    return lambda: ttnn.concat([a, b], dim=-1)


@rejected("add", r"shapes \[\[1, 1, 32, 64\], \[1, 1, 32, 96\]\] cannot be broadcast together",
          "Invalid subtile broadcast type")
def add_incompatible_shapes(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 1, 32, 64)), tile(ttnn, device, rand(1, 1, 32, 96))
    return lambda: ttnn.add(a, b)


@rejected("reshape", r"shape \[1, 1, 32, 32\] has volume 1024, the input \[1, 1, 32, 64\] has 2048",
          "new_volume == old_volume")
def reshape_volume(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 32, 64))
    return lambda: ttnn.reshape(x, (1, 1, 32, 32))


INVALID = [fill_cache_dtype_mismatch, fill_cache_seq_too_long, fill_cache_batch_idx_out_of_range,
           fill_cache_head_dim_mismatch, fill_cache_batch_without_idx_tensor, update_cache_unsharded_input,
           update_cache_idxs_count, update_cache_page_table_not_int32, update_cache_idxs_not_int32,
           update_cache_bfp8_input, fused_update_overlapping_inputs, decode_causal_without_cur_pos,
           decode_cur_pos_batch, decode_page_table_batch, decode_mask_with_causal, decode_non_causal_k_chunk,
           decode_gqa_sharded_output, decode_fp32_q, decode_fp32_cache, unpaged_decode_k_chunk, linear_inner_dims,
           matmul_inner_dims, sdpa_causal_sq_ne_sk, sdpa_fp32_operands, sdpa_mask_with_causal, sdpa_mask_with_window,
           sdpa_mask_heads, sdpa_heads_not_divisible, chunked_sdpa_past_page_table,
           chunked_sdpa_start_not_chunk_multiple, rotary_bfp8_input, rotary_decode_interleaved,
           create_qkv_heads_bad_width, fill_cache_batch_out_of_range, bfp8_row_major, typecast_row_major_to_bfp8,
           concat_mixed_dtypes, add_incompatible_shapes, reshape_volume]
