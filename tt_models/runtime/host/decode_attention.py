"""Decode attention (``ttnn.transformer.scaled_dot_product_attention_decode`` and its paged form): one query row per
user over the keys it has cached, computed as ``attention.py`` says (fp32, the output rounded to Q's dtype).

Decode is memory bound, so K and V are read once each, by two batched matmuls with the query heads of a KV head
grouped together; users that read the same key sets (a request's rows in a cross-attention prefill, cross-attention
blocks read again unwritten, a decode tile's padding rows) share the reads and the products.
"""

from __future__ import annotations

import torch

from .attention import SDPA_DTYPES, cache_view, sink_logits
from .errors import check, unsupported
from .paged_cache import check_blocks, check_page_table, gather_pages
from .read_mostly import KeptSet, kept_sets
from .tensor import Tensor
from .types import (
    DRAM_MEMORY_CONFIG, BufferType, DataType, Layout, MemoryConfig, SDPAProgramConfig, TensorMemoryLayout,
    WormholeComputeKernelConfig,
)

__all__ = [
    "scaled_dot_product_attention_decode",
    "paged_scaled_dot_product_attention_decode",
]


def _decode_chunk(k_len: int, program_config: SDPAProgramConfig | None, paged: bool, op: str) -> int:
    """The K chunk size the host wrapper picks (it only matters for validation here)."""
    if program_config is not None and program_config.k_chunk_size > 0:
        chunk = program_config.k_chunk_size
        check(chunk & (chunk - 1) == 0, op, f"User provided k_chunk_size must be power of 2, got: {chunk}")
        check(chunk % 32 == 0, op, f"User provided k_chunk_size must be multiple of 32, got: {chunk}")
        return chunk
    if paged:
        return 0  # the kernel picks
    i = 1  # largest power-of-2 divisor of S, at most 512
    while i < k_len and k_len % (1 << (i + 1)) == 0:
        i += 1
    chunk = min(512, 1 << i)
    check(chunk % 32 == 0, op,
          f"Chunk size must be multiple of 32, but the maximum calculated k_chunk_size is: {chunk}")
    return chunk


def _check_decode_operands(q: Tensor, k: Tensor, v: Tensor, memory_config: MemoryConfig | None, op: str) -> None:
    for t in (q, k, v):
        check(t.device() is not None, op, "Operands to SDPA need to be on device!")
        check(t.dtype in SDPA_DTYPES, op, lambda: f"Unsupported data type {t.dtype.name}.")
    for t in (k, v):
        check(t.layout == Layout.TILE, op, "Inputs to SDPA must be tilized except for Q")
        check(not t.is_sharded() and t.memory_config().buffer_type == BufferType.DRAM, op,
              "K and V must be DRAM interleaved")
    qmc = q.memory_config()
    if q.is_sharded():
        check(qmc.memory_layout == TensorMemoryLayout.HEIGHT_SHARDED, op,
              lambda: f"Q tensor memory layout must be HEIGHT_SHARDED when sharded but got {qmc.memory_layout.name}")
    else:
        check(qmc.buffer_type == BufferType.DRAM, op,
              lambda: f"Q tensor buffer type must be DRAM when not sharded but got {qmc.buffer_type.name}")
    if memory_config is not None and memory_config.is_sharded():
        check(memory_config.memory_layout == TensorMemoryLayout.HEIGHT_SHARDED, op,
              "Output memory config layout must be HEIGHT_SHARDED when sharded")
    check(len(q.shape) == 4 and q.shape[0] == 1, op, lambda: f"Q must be [1, B, NH, D], got {list(q.shape)}")
    check(k.shape[1] == v.shape[1], op,
          lambda: f"Flash decode expects K and V to have same number of heads, but got {k.shape[1]} and {v.shape[1]}")
    if k.shape[1] > 1:
        check(not (memory_config is not None and memory_config.is_sharded()), op,
              "Sharded output not supported for GQA")
        check(q.dtype == DataType.BFLOAT16, op, lambda: f"GQA expects BFLOAT16 input tensor, but got {q.dtype.name}")
        check(q.shape[2] % k.shape[1] == 0, op,
              lambda: f"GQA expects Q to have a multiple of K heads, but got {q.shape[2]} and {k.shape[1]}")


def _check_cur_pos(cur_pos_tensor: Tensor, batch: int, op: str) -> torch.Tensor:
    t = cur_pos_tensor
    check(t.dtype == DataType.INT32, op, lambda: f"Expect cur_pos to be INT32, got {t.dtype.name}")
    check(t.layout == Layout.ROW_MAJOR, op, lambda: f"Expect cur_pos to be ROW_MAJOR, got {t.layout.name}")
    pos = t.value.reshape(-1).to(torch.int64)
    check(len(pos) == batch, op, lambda: f"cur_pos must have batch size equal to Q, got {len(pos)} and {batch}")
    return pos


def _decode_bias(attn_mask: Tensor | None, batch: int, heads: int, length: int, chunk: int,
                 op: str) -> torch.Tensor | None:
    """An additive ``[1|B, NH, 1, L]`` bias from a decode mask ``[.., B|1, NH, L]`` (leading dims flattened)."""
    if attn_mask is None:
        return None
    m = attn_mask
    check(m.dtype in SDPA_DTYPES, op, f"Unsupported data type for mask tensor: {m.dtype.name}.")
    check(m.shape[-2] == heads, op, f"Expect same number of heads in mask as in Q, got {m.shape[-2]} and {heads}")
    check(chunk > 0, op, "Must provide k_chunk_size if using attention mask!")
    check(m.padded_shape[-1] % chunk == 0, op,
          f"Mask sequence length must be multiple of chunk size, got: {m.padded_shape[-1]} and {chunk}")
    # The reader strides the mask rows by the K length, so any other length reads the wrong keys.
    check(m.shape[-1] == length, op, f"Expect same sequence length in mask as in K, got {m.shape[-1]} and {length}")
    values = m.float().reshape(-1, heads, length)
    check(values.shape[0] in (1, batch), op, f"mask batch {values.shape[0]} must be 1 or {batch}")
    return values[:, :, None, :]


def _decode(q: Tensor, keys: torch.Tensor, values: torch.Tensor, keep: torch.Tensor, bias: torch.Tensor | None,
            active: torch.Tensor, scale: float | None, sink: torch.Tensor | None,
            memory_config: MemoryConfig | None, masked: bool, key_set: torch.Tensor | None = None) -> Tensor:
    """Attention of Q ``[1, B, NH, D]`` over keys ``[b, NKV, L, D]`` of the ``b`` active users, restricted to
    ``keep [B, L]``.

    Only ``active`` users are computed (the kernel skips the others and leaves their rows unwritten: zeros
    here, as in the golden). ``masked``: the values are zero outside each user's keep already. ``key_set [b]``:
    the active users share key sets, user ``i`` reading ``keys[key_set[i]]`` (None: one set per user).
    """
    batch, heads, dim = q.shape[1], q.shape[2], q.shape[3]
    rows = active.nonzero().flatten()
    if len(rows) == batch:
        out = _decode_rows(q.float()[0], keys, values, keep, bias, scale, sink, masked, key_set)
    else:
        out = torch.zeros(batch, heads, dim)
        if len(rows):
            out[rows] = _decode_rows(q.float()[0][rows], keys, values, keep[rows],
                                     None if bias is None or bias.shape[0] == 1 else bias[rows], scale, sink, masked,
                                     key_set)
    return q.like(out[None], memory_config=memory_config or DRAM_MEMORY_CONFIG)


def _decode_rows(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, keep: torch.Tensor,
                 bias: torch.Tensor | None, scale: float | None, sink: torch.Tensor | None,
                 masked: bool, key_set: torch.Tensor | None = None) -> torch.Tensor:
    """``[b, NH, D]`` queries over ``[b, NKV, L, D]`` keys: decode is memory bound, so K and V are read once
    each, by two batched matmuls with the query heads of a KV head grouped together (no repeat of K/V).

    With ``key_set``, users share key sets (the rows of one request in a cross-attention prefill, or a cache read
    again unwritten): ``keys``/``values`` hold one ``[NKV, L, D]`` set each, the values already zero outside the
    set's keep, and each user's products are the same per-user matmuls, bit for bit, on its set. ``masked``: the
    values are zero outside keep already."""
    batch, heads, dim = query.shape
    kv_heads, length = keys[0].shape[-3], keys[0].shape[-2]
    scale = dim ** -0.5 if scale is None else scale
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    if key_set is None:
        # Rows outside keep may hold anything (stale or NaN rows of a partly written block): 0 * NaN would leak.
        if not masked and not bool(keep.all()):
            values = values.masked_fill(~keep[:, None, :, None], 0.0)
        logits = grouped @ keys.transpose(-1, -2)
    else:
        sets, source = key_set.tolist(), _repeats_of_last(query, key_set)
        logits = _per_user([grouped[i] @ keys[s].transpose(-1, -2) if source[i] == i else None
                            for i, s in enumerate(sets)], source)
    logits = logits.reshape(batch, heads, length) * scale
    if bias is not None:
        logits = logits + bias[:, :, 0, :]
    logits = logits.masked_fill(~keep[:, None, :], float("-inf"))
    if sink is not None:  # one extra logit per head whose value row is zero
        logits = torch.cat([logits, (scale * sink).reshape(1, heads, 1).expand(batch, heads, 1)], dim=-1)
    probs = torch.softmax(logits, dim=-1)[..., :length].reshape(batch, kv_heads, heads // kv_heads, length)
    if key_set is None:
        return (probs @ values).reshape(batch, heads, dim)
    return _per_user([probs[i] @ values[s] if source[i] == i else None for i, s in enumerate(sets)],
                     source).reshape(batch, heads, dim)


def _repeats_of_last(query: torch.Tensor, key_set: torch.Tensor) -> list[int]:
    """Per user, the user whose products it takes: the last one for users that repeat it (the same query bits over
    the same key set: a decode tile's padding rows), itself otherwise."""
    bits = query.reshape(len(query), -1).view(torch.int32)
    repeats = ((bits == bits[-1]).all(dim=1) & (key_set == key_set[-1])).tolist()
    return [len(repeats) - 1 if repeat else i for i, repeat in enumerate(repeats)]


def _per_user(products: list[torch.Tensor | None], source: list[int]) -> torch.Tensor:
    """The users' products stacked, each ``None`` (a repeat) filled from the user ``source`` names."""
    return torch.stack([p if p is not None else products[j] for p, j in zip(products, source)])


def _causal_keep(pos: torch.Tensor, length: int, window: int | None) -> torch.Tensor:
    """Keys ``[max(0, pos+1-W), pos]`` per user (none for pos == -1), over ``length`` slots."""
    j = torch.arange(length)
    if window is None:
        return j <= pos[:, None]
    lo = (pos + 1 - window).clamp(min=0)
    return (j >= lo[:, None]) & (j <= pos[:, None])


def scaled_dot_product_attention_decode(input_tensor_q: Tensor, input_tensor_k: Tensor, input_tensor_v: Tensor, *,
                                        is_causal: bool = True, attn_mask: Tensor | None = None,
                                        cur_pos: list[int] = [], cur_pos_tensor: Tensor | None = None,
                                        attention_sink: Tensor | None = None, scale: float | None = None,
                                        sliding_window_size: int | None = None,
                                        memory_config: MemoryConfig | None = None,
                                        program_config: SDPAProgramConfig | None = None,
                                        compute_kernel_config: WormholeComputeKernelConfig | None = None,
                                        share_cache: bool | None = None) -> Tensor:
    op = "scaled_dot_product_attention_decode"
    q, k, v = input_tensor_q, input_tensor_k, input_tensor_v
    _check_decode_operands(q, k, v, memory_config, op)
    _, batch, heads, dim = q.shape
    seq = k.shape[2]
    chunk = _decode_chunk(seq, program_config, False, op)
    check(k.shape[2] == v.shape[2], op,
          f"K and V tensors must have the same sequence length. K: {k.shape[2]}, V: {v.shape[2]}")
    check(k.shape[3] == dim and v.shape[3] == dim, op, "K and V hidden dimension must equal Q hidden dimension")
    if share_cache:
        check(k.shape[0] == 1 and v.shape[0] == 1, op,
              f"Share cache expects K to have batch size of 1, but got {k.shape[0]}")
    else:
        check(k.shape[0] == batch and v.shape[0] == batch, op,
              f"K tensor batch size ({k.shape[0]}) must equal B ({batch})")
    check(k.padded_shape[2] % chunk == 0, op,
          f"K sequence length must be multiple of chunk size, got: {k.padded_shape[2]} and {chunk}")
    check(not (is_causal and attn_mask is not None), op, "Must not have attn_mask tensor for causal attention")
    keys, values = (t.value.expand(batch, -1, -1, -1) for t in (k, v))
    if is_causal:
        check(len(cur_pos) > 0 or cur_pos_tensor is not None, op, "causal decode needs cur_pos or cur_pos_tensor")
        if cur_pos_tensor is not None:
            pos = _check_cur_pos(cur_pos_tensor, batch, op)
        else:
            pos = torch.tensor(list(cur_pos), dtype=torch.int64)
            check(len(pos) == batch and bool((pos >= 0).all()), op, f"cur_pos must hold {batch} non-negative positions")
        check(bool((pos < seq).all()), op, "cur_pos must be <= K sequence dim")
        length = max(int(pos.max()) + 1, 1)
        keep = _causal_keep(pos, length, sliding_window_size)
        keys, values = keys[:, :, :length], values[:, :, :length]
        bias = None
    else:
        if sliding_window_size is not None:
            raise unsupported(op, "sliding_window_size with is_causal=False")
        pos = torch.zeros(batch, dtype=torch.int64)
        keep = torch.ones(batch, seq, dtype=torch.bool)
        bias = _decode_bias(attn_mask, batch, heads, seq, chunk, op)
    active = pos >= 0
    keys, values = keys[active], values[active]
    return _decode(q, keys, values, keep, bias, active, scale, sink_logits(attention_sink, heads, op),
                   memory_config, masked=False)


def paged_scaled_dot_product_attention_decode(input_tensor_q: Tensor, input_tensor_k: Tensor,
                                              input_tensor_v: Tensor, page_table_tensor: Tensor, *,
                                              is_causal: bool = True, attn_mask: Tensor | None = None,
                                              cur_pos_tensor: Tensor | None = None,
                                              attention_sink: Tensor | None = None, scale: float | None = None,
                                              sliding_window_size: int | None = None,
                                              memory_config: MemoryConfig | None = None,
                                              program_config: SDPAProgramConfig | None = None,
                                              compute_kernel_config: WormholeComputeKernelConfig | None = None,
                                              paged_cache_geometry: object = None,
                                              cache_position_modulo: int | None = None,
                                              spec_multi_pos_tiles: int = 0) -> Tensor:
    op = "paged_scaled_dot_product_attention_decode"
    if spec_multi_pos_tiles != 0:
        raise unsupported(op, "spec_multi_pos_tiles")
    q = input_tensor_q
    _check_decode_operands(q, input_tensor_k, input_tensor_v, memory_config, op)
    _, batch, heads, dim = q.shape
    k, v = (cache_view(c, paged_cache_geometry, dim, op) for c in (input_tensor_k, input_tensor_v))
    check(k.shape[2] == v.shape[2], op, "K and V must have same block size")
    check(k.shape[3] == v.shape[3] == dim, op, "Q, K, V must have same hidden size")
    if is_causal:
        check(attn_mask is None, op, "Must not have attn_mask tensor for causal attention")
        check(cur_pos_tensor is not None, op, "Must have cur_pos tensor for paged attention in causal mode")
        # As the real op: cur_pos is checked before the page table, against the page table's rows (its B).
        pos = _check_cur_pos(cur_pos_tensor, page_table_tensor.shape[0], op)
    table = check_page_table(page_table_tensor, op, batch)
    bs, slots = k.shape[2], table.shape[1] * k.shape[2]
    chunk = _decode_chunk(slots, program_config, True, op)
    bias = None
    if is_causal:
        if cache_position_modulo is None:
            check(bool((pos < slots).all()), op, f"cur_pos must be < the page table's {slots} positions")
            length = -(-(int(pos.max()) + 1) // bs) * bs if bool((pos >= 0).any()) else bs
            keep = _causal_keep(pos, length, sliding_window_size)
        else:
            keep, length = _circular_keep(pos, cache_position_modulo, sliding_window_size, bs, slots, op)
    else:
        if sliding_window_size is not None or cache_position_modulo is not None:
            raise unsupported(op, "sliding_window_size / cache_position_modulo with is_causal=False")
        bias = _decode_bias(attn_mask, batch, heads, slots, chunk, op)  # the real op checks the mask first
        check(chunk > 0, op, "Must provide k_chunk_size if paged and non-causal!")
        check(slots % chunk == 0, op, f"K sequence length must be multiple of chunk size, got: {slots} and {chunk}")
        pos, length = torch.zeros(batch, dtype=torch.int64), slots
        keep = torch.ones(batch, slots, dtype=torch.bool)
    # Read only the blocks holding visible keys: others may be unallocated (-1) or belong to other users.
    need = keep.reshape(batch, -1, bs).any(-1)
    blocks = table[:, :need.shape[1]]
    check_blocks(blocks[need], k.shape[0], op)
    blocks = blocks.masked_fill(~need, 0)
    # Skipped users (pos -1) read nothing: gather only the active users' pages.
    active = pos >= 0
    rows = active.nonzero().flatten()
    keys, values, key_set = _key_sets(input_tensor_k.value, input_tensor_v.value, k, v, blocks[rows], keep[rows])
    return _decode(q, keys, values, keep, bias, active, scale, sink_logits(attention_sink, heads, op),
                   memory_config, masked=True, key_set=key_set)


def _key_sets(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: torch.Tensor,
              keep: torch.Tensor) -> tuple:
    """The users' keys and values, values zero outside each user's keep: batched ``[b, NKV, L, D]`` (and None),
    or one ``[NKV, L, D]`` set per distinct (blocks, keep) row (and each user's set).

    Users share sets when they read the same blocks (a request's rows in a cross-attention prefill); sets whose
    blocks nobody wrote since they were gathered (cross-attention blocks at every decode step) are not gathered
    again."""
    kept = kept_sets(k_cache, v_cache)
    nb, geometry = blocks.shape[1], tuple(k.shape)
    rows = torch.cat([blocks, keep.to(blocks.dtype)], dim=1)
    # The distinct rows in order of first use, found in Python: a few dozen short rows (torch.unique sorts them).
    user_names = [(geometry, tuple(v.shape), r.tobytes()) for r in rows.numpy()]
    first_user: dict[tuple, int] = {}
    for user, name in enumerate(user_names):
        first_user.setdefault(name, user)
    names = list(first_user)
    unique = rows[list(first_user.values())]
    missing = [i for i, name in enumerate(names) if kept is None or name not in kept]
    if len(unique) == len(rows) and len(missing) == len(unique):  # nothing shared, nothing kept: one batched read
        keys, values = _gathered(k, v, blocks, keep)
        _keep(kept, user_names, keys, values, geometry, blocks)
        return keys, values, None
    found = kept if kept is not None else {}
    if missing:
        keys, values = _gathered(k, v, unique[missing, :nb], unique[missing, nb:].bool())
        _keep(found, [names[i] for i in missing], keys, values, geometry, unique[missing, :nb])
    number = {name: i for i, name in enumerate(names)}
    key_set = torch.tensor([number[name] for name in user_names], dtype=torch.int64)
    return [found[n].keys for n in names], [found[n].values for n in names], key_set


def _gathered(k: torch.Tensor, v: torch.Tensor, blocks: torch.Tensor,
              keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    keys, values = gather_pages(k, blocks), gather_pages(v, blocks)
    # Rows outside keep may hold anything (stale or NaN rows of a partly written block): 0 * NaN would leak.
    # Zeroed by their indices: a few rows per user, where a mask over every value costs a pass over all of them.
    users, rows = (~keep).nonzero(as_tuple=True)
    values[users, :, rows, :] = 0.0
    return keys, values


def _keep(kept: dict[tuple, KeptSet] | None, names: list[tuple], keys: torch.Tensor, values: torch.Tensor,
          geometry: tuple[int, ...], blocks: torch.Tensor) -> None:
    """Keep each set for later reads (when its caches can be tracked)."""
    if kept is not None:
        for name, key, value, row in zip(names, keys, values, blocks.tolist()):
            kept[name] = KeptSet(key, value, geometry, frozenset(row))


def _circular_keep(pos: torch.Tensor, modulo: int, window: int | None, bs: int, slots: int,
                   op: str) -> tuple[torch.Tensor, int]:
    """Ring-buffer cache: logical key ``j`` sits in slot ``j % M``; keys ``[max(0, pos+1-W), pos]`` (W <= M)."""
    check(0 < modulo <= slots and modulo % bs == 0, op,
          f"cache_position_modulo must be positive, block-aligned, and <= {slots}; got {modulo}")
    window = modulo if window is None else window
    check(0 < window <= modulo, op, f"sliding_window_size must be in [1, {modulo}], got {window}")
    slot = torch.arange(modulo)
    age = torch.remainder(pos[:, None] - slot, modulo)  # how many tokens ago the slot was last written
    keep = (age < torch.clamp(pos + 1, max=window)[:, None]) & (pos[:, None] >= 0)
    return keep, modulo
