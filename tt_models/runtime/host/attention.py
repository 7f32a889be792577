"""Scaled dot-product attention (``ttnn.transformer.*``): prefill and chunked prefill over a paged cache here, (paged)
decode in ``decode_attention.py``, with the operand checks both use.

Everything is computed in fp32 with torch's SDPA (GQA by grouping query heads, which is repeat_interleave of the
KV heads) and the output rounded to Q's dtype. Math fidelity and approximate exp are not emulated. Masks follow
the goldens: an additive mask is added to the scaled logits (the kernels add it before the scale, so only 0/-inf
masks agree on every path). An ``attention_sink`` is one learned logit per query head in the softmax's denominator
(its value row zero), multiplied by ``scale`` as the kernels and goldens do: ``[1, NH, 1, 1]`` tiled for prefill,
column 0 of an ``[NH, 32]`` BF16 tile for decode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .errors import check, unsupported
from .paged_cache import check_blocks, check_page_table, gather_pages, paged_view
from .tensor import Tensor
from .types import (
    DRAM_MEMORY_CONFIG, TILE_SIZE, DataType, Layout, MemoryConfig, SDPAProgramConfig, WormholeComputeKernelConfig,
)

__all__ = [
    "scaled_dot_product_attention",
    "chunked_scaled_dot_product_attention",
]


SDPA_DTYPES = (DataType.BFLOAT16, DataType.BFLOAT8_B, DataType.BFLOAT4_B)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, *, keep: torch.Tensor | None = None,
            bias: torch.Tensor | None = None, sink: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
    """``softmax(scale * q kᵀ + bias)`` over the keys in ``keep``, times v.

    q ``[B, NH, Sq, D]``; k, v ``[B, NKV, L, D]``; keep (bool) and bias broadcast to ``[B, NH, Sq, L]``;
    ``causal`` (with no keep/bias/sink) is the plain lower-triangular mask; sink ``[NH]`` is one extra logit per
    head whose value row is zero.
    """
    if sink is not None:
        batch, heads, sq, length = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        k, v = F.pad(k, (0, 0, 0, 1)), F.pad(v, (0, 0, 0, 1))
        logits = torch.zeros(1, 1, 1, length) if bias is None else bias
        if keep is not None:
            logits = torch.where(keep, logits, float("-inf"))
        sink_col = (scale * sink).reshape(1, heads, 1, 1).expand(batch, heads, sq, 1)
        bias, keep = torch.cat([logits.expand(batch, heads, sq, length), sink_col], dim=-1), None
    mask = keep if bias is None else (bias if keep is None else torch.where(keep, bias, float("-inf")))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=scale,
                                          enable_gqa=True)


def _check_chunks(program_config: SDPAProgramConfig | None, op: str) -> None:
    if program_config is not None:
        for name in ("q_chunk_size", "k_chunk_size"):
            size = getattr(program_config, name)
            check(size % TILE_SIZE == 0, op, f"{name} must be a multiple of {TILE_SIZE}, got {size}")


def _check_prefill_operands(op: str, *tensors: Tensor) -> None:
    for t in tensors:
        check(t.device() is not None, op, "Operands to SDPA need to be on device!")
        check(t.layout == Layout.TILE, op, "Inputs to SDPA must be tilized")
        check(t.dtype in SDPA_DTYPES, op,
              lambda: f"Unsupported data type {t.dtype.name} (BFLOAT16, BFLOAT8_B, BFLOAT4_B)")
        check(not t.is_sharded(), op, "Operands to SDPA need to be interleaved, not sharded")
        check(len(t.shape) == 4, op, lambda: f"SDPA operands are rank 4, got {list(t.shape)}")


def prefill_sink_logits(attention_sink: Tensor | None, heads: int, op: str) -> torch.Tensor | None:
    """One logit per Q head from the prefill ops' ``[1, NH, 1, 1]`` tiled sink (BF16, BFP8 or BFP4)."""
    if attention_sink is None:
        return None
    s = attention_sink
    check(len(s.shape) == 4, op, f"Attention sink must be 4D [1, NH, 1, 1], got {list(s.shape)}")
    check(s.shape[0] == 1, op, f"Attention sink batch dimension must be 1, got {s.shape[0]}")
    check(s.shape[2] == 1 and s.shape[3] == 1, op, f"Attention sink hidden dimension must be 1, got {list(s.shape)}")
    check(s.shape[1] == heads, op, f"Attention sink local num_heads must match Q. Got sink: {s.shape[1]}, Q: {heads}")
    check(s.dtype in SDPA_DTYPES, op, "Attention sink must be in BF16, BFP8, or BFP4 dataformat")
    check(s.layout == Layout.TILE, op, "Attention sink must be tilized")
    return s.float().reshape(heads)


def sink_logits(attention_sink: Tensor | None, heads: int, op: str) -> torch.Tensor | None:
    """One logit per Q head, from column 0 of decode's ``[NH (padded), 32]`` BF16 tile."""
    if attention_sink is None:
        return None
    check(len(attention_sink.shape) == 2, op, "Attention sink must have 2 dimensions")
    check(attention_sink.padded_shape[1] == TILE_SIZE, op, "Attention sink must be a single tile wide")
    check(attention_sink.shape[0] >= heads, op, f"Attention sink has {attention_sink.shape[0]} rows for {heads} heads")
    check(attention_sink.dtype == DataType.BFLOAT16, op, "Attention sink must by a BF16 tensor")
    check(attention_sink.layout == Layout.TILE, op, "Attention sink must be in TILE layout")
    return attention_sink.float()[:heads, 0]


def _window_keep(q_pos: torch.Tensor, length: int, window: int | None) -> torch.Tensor:
    """Causal visibility ``[Sq, L]`` for queries at absolute positions ``q_pos``."""
    j = torch.arange(length)
    keep = j <= q_pos[:, None]
    if window is not None:
        keep &= j > q_pos[:, None] - window
    return keep


# --- prefill -------------------------------------------------------------------------------------

def scaled_dot_product_attention(input_tensor_q: Tensor, input_tensor_k: Tensor, input_tensor_v: Tensor, *,
                                 attn_mask: Tensor | None = None, is_causal: bool = True, scale: float | None = None,
                                 sliding_window_size: int | None = None, memory_config: MemoryConfig | None = None,
                                 program_config: SDPAProgramConfig | None = None,
                                 compute_kernel_config: WormholeComputeKernelConfig | None = None,
                                 attention_sink: Tensor | None = None, cu_window_seqlens: Tensor | None = None,
                                 windowed_q_token_offset: int = 0,
                                 windowed_q_token_offset_tensor: Tensor | None = None,
                                 output_concat_heads: bool = False,
                                 attn_mask_block_map: Tensor | None = None) -> Tensor:
    op = "scaled_dot_product_attention"
    if (cu_window_seqlens is not None or windowed_q_token_offset != 0 or windowed_q_token_offset_tensor is not None
            or attn_mask_block_map is not None):
        raise unsupported(op, "windowed attention (cu_window_seqlens / windowed_q_token_offset / attn_mask_block_map)")
    q, k, v = input_tensor_q, input_tensor_k, input_tensor_v
    _check_prefill_operands(op, q, k, v)
    batch, heads, sq, dim = q.shape
    _, kv_heads, sk, _ = k.shape
    check(tuple(k.shape) == tuple(v.shape), op, f"K {list(k.shape)} and V {list(v.shape)} must have the same shape")
    check(k.shape[0] == batch and k.shape[3] == dim, op,
          f"Q {list(q.shape)} and K {list(k.shape)} differ in batch or D")
    check(dim % TILE_SIZE == 0, op,
          f"head_dim {dim} must be a multiple of {TILE_SIZE} (only sequence dims may be padded)")
    check(heads % kv_heads == 0, op, f"GQA expects Q to have a multiple of K heads, but got {heads} and {kv_heads}")
    _check_chunks(program_config, op)
    if is_causal:
        check(attn_mask is None, op, "attn_mask must be None when is_causal is True")
        check(sq == sk, op, f"Causal SDPA requires Q and K to have the same sequence length, got {sq} and {sk}")
    check(attn_mask is None or sliding_window_size is None, op, "attn_mask cannot be combined with sliding_window_size")
    bias = None
    if attn_mask is not None:
        m = attn_mask
        check(m.layout == Layout.TILE and m.dtype in SDPA_DTYPES, op, "attn_mask must be TILE BF16/BFP8_B/BFP4_B")
        check(len(m.shape) == 4, op, f"attn_mask must be 4D, got {list(m.shape)}")
        check(m.shape[0] in (1, batch), op,
              "Mask batch dim must either be 1 (to be broadcasted across all batches) or must match Q batch dimension")
        check(m.shape[1] in (1, heads), op,
              "Mask num_heads must either be 1 (to be broadcasted across all heads) or must match Q heads dimension")
        check(m.shape[2] == sq, op, f"Mask sequence length must match Q sequence length, got {m.shape[2]} and {sq}")
        check(m.shape[3] == sk, op, f"Mask sequence length must match K sequence length, got {m.shape[3]} and {sk}")
        bias = m.float()
    keep = None
    if sliding_window_size is not None:
        # Causal: the last W keys up to the query; non-causal: keys within W//2 either side, with the
        # queries aligned to the end of the keys (as the golden places them when Sq != Sk).
        i, j = torch.arange(sq)[:, None] + max(0, sk - sq), torch.arange(sk)
        keep = _window_keep(torch.arange(sq), sk, sliding_window_size) if is_causal else \
            (j - i).abs() <= sliding_window_size // 2
    sink = prefill_sink_logits(attention_sink, heads, op)
    if is_causal and sink is not None and keep is None:
        keep = _window_keep(torch.arange(sq), sk, None)
    scale = dim ** -0.5 if scale is None else scale
    out = _attend(q.float(), k.float(), v.float(), scale, keep=keep, bias=bias, sink=sink, causal=is_causal)
    if output_concat_heads:
        out = out.transpose(1, 2).reshape(batch, 1, sq, heads * dim)
    return q.like(out, memory_config=memory_config or DRAM_MEMORY_CONFIG)


def chunked_scaled_dot_product_attention(input_tensor_q: Tensor, input_tensor_k: Tensor, input_tensor_v: Tensor,
                                         page_table_tensor: Tensor, chunk_start_idx: int | None = None, *,
                                         chunk_start_idx_tensor: Tensor | None = None, scale: float | None = None,
                                         memory_config: MemoryConfig | None = None,
                                         program_config: SDPAProgramConfig | None = None,
                                         compute_kernel_config: WormholeComputeKernelConfig | None = None,
                                         paged_cache_geometry: object = None, sliding_window_size: int | None = None,
                                         attention_sink: Tensor | None = None) -> Tensor:
    op = "chunked_scaled_dot_product_attention"
    float32_exact = isinstance(scale, float) and float(torch.tensor(scale, dtype=torch.float32)) == scale
    if scale is not None and not float32_exact:
        # ttnn 0.81.1's binding takes scale as a 32-bit float and refuses a Python value it cannot hold exactly.
        raise TypeError(f"{op}(): incompatible function arguments: scale={scale!r} is not exactly representable "
                        f"as float32 (pass float(torch.tensor(scale, dtype=torch.float32)))")
    q = input_tensor_q
    _check_prefill_operands(op, q, input_tensor_k, input_tensor_v)
    batch, heads, sq, dim = q.shape
    check((chunk_start_idx is None) != (chunk_start_idx_tensor is None), op,
          "Exactly one of chunk_start_idx or chunk_start_idx_tensor must be provided")
    if chunk_start_idx_tensor is not None:
        t = chunk_start_idx_tensor
        check(t.dtype == DataType.INT32 and tuple(t.shape) == (1,) and t.device() is not None, op,
              "chunk_start_idx_tensor must be an INT32 device tensor of shape [1]")
        start = int(t.value[0])
    else:
        start = chunk_start_idx
        if program_config is not None:
            for name in ("q_chunk_size", "k_chunk_size"):
                size = getattr(program_config, name)
                check(start % size == 0, op, f"chunk_start_idx ({start}) must be a multiple of {name} ({size})")
    check(start >= 0, op, f"chunk_start_idx must be >= 0, got {start}")
    _check_chunks(program_config, op)
    k, v = (cache_view(c, paged_cache_geometry, dim, op) for c in (input_tensor_k, input_tensor_v))
    check(k.shape == v.shape, op, "K and V must have the same block size and heads")
    check(heads % k.shape[1] == 0, op, f"GQA expects Q to have a multiple of K heads, but got {heads} and {k.shape[1]}")
    check(k.shape[3] == dim, op, f"Q head_dim {dim} and cache head_dim {k.shape[3]} differ")
    table = check_page_table(page_table_tensor, op, batch)
    bs = k.shape[2]
    check(table.shape[1] * bs >= start + sq, op,
          f"kv_len {table.shape[1] * bs} (page table blocks * block_size) must be >= chunk_start_idx + Sq "
          f"({start + sq})")
    length = start + sq
    n = -(-length // bs)
    check_blocks(table[:, :n], k.shape[0], op)
    keys, values = (gather_pages(c, table[:, :n])[:, :, :length] for c in (k, v))
    sink = prefill_sink_logits(attention_sink, heads, op)
    # The first chunk without window or sink is the plain causal square: let torch use its flash kernel.
    plain = start == 0 and sliding_window_size is None and sink is None
    keep = None if plain else _window_keep(torch.arange(start, start + sq), length, sliding_window_size)
    scale = dim ** -0.5 if scale is None else scale
    out = _attend(q.float(), keys, values, scale, keep=keep, sink=sink, causal=plain)
    return q.like(out, memory_config=memory_config or DRAM_MEMORY_CONFIG)


def cache_view(cache: Tensor, geometry: object, head_dim: int, op: str) -> torch.Tensor:
    """The paged cache values, seen through a ``PagedCacheGeometryOverride`` when one is given."""
    if geometry is None or (geometry.block_size == 0 and geometry.num_kv_heads == 0):
        return cache.value
    return paged_view(cache, geometry.num_kv_heads, geometry.block_size, head_dim, op)
