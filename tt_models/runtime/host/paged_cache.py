"""Paged KV-cache writes (``ttnn.experimental.paged_update_cache`` / ``paged_fused_update_cache`` /
``paged_fill_cache``) and the page-table gather the paged attention ops read through.

A paged cache is ``[max_num_blocks, NKV, block_size, D]``; ``page_table[b, j]`` is the physical block
holding logical positions ``[j*bs, (j+1)*bs)`` of user ``b``. The ops update ``cache.value`` in place
(the cache is a device buffer: every holder of the tensor sees the write) and return the cache.
"""

from __future__ import annotations

from typing import Callable

import torch

from .bfp import round_to_bfloat16
from .errors import check, unsupported
from .read_mostly import tracked_write
from .tensor import Tensor, quantize
from .types import (
    TILE_SIZE, BufferType, DataType, Layout, ShardOrientation, TensorMemoryLayout, WormholeComputeKernelConfig,
)

__all__ = ["paged_update_cache", "paged_fused_update_cache", "paged_fill_cache"]

CACHE_DTYPES = (DataType.FLOAT32, DataType.BFLOAT16, DataType.BFLOAT8_B, DataType.BFLOAT4_B)


# --- helpers shared with kv_cache.py and the attention modules -------------------------------------

def check_page_table(page_table: Tensor, op: str, batch: int) -> torch.Tensor:
    """Validate a ``[B, nb]`` INT32 ROW_MAJOR page table (UINT16 if sharded); return its values as int64."""
    want = DataType.UINT16 if page_table.is_sharded() else DataType.INT32
    check(page_table.dtype == want, op,
          lambda: f"Expect page table to have datatype {want.name}, got {page_table.dtype.name}")
    check(page_table.layout == Layout.ROW_MAJOR, op, "Expect page table to have memory layout in ROW MAJOR")
    check(len(page_table.shape) == 2, op,
          lambda: f"page table must be [batch, max_blocks_per_seq], got {list(page_table.shape)}")
    check(page_table.shape[0] == batch, op,
          lambda: f"Batch size between page_table ({page_table.shape[0]}) and input ({batch}) must match")
    return page_table.value.to(torch.int64)


def check_blocks(blocks: torch.Tensor, num_blocks: int, op: str) -> None:
    """Every page-table entry the op dereferences must name a physical block."""
    bad = (blocks < 0) | (blocks >= num_blocks)
    if bool(bad.any()):
        check(False, op, f"page table entry {int(blocks[bad][0])} used by the op is outside [0, {num_blocks})")


def gather_pages(cache: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``[P, H, bs, D]`` pages read through a ``[B, n]`` table -> a new contiguous ``[B, H, n*bs, D]``."""
    batch, n = table.shape
    pages, heads, bs, dim = cache.shape
    # One index_select of (block, head) pages lands the result in [B, H, n, bs, D] order in one pass (indexing
    # blocks and heads with two index tensors does the same several times slower).
    pages_read = (table[:, None, :] * heads + torch.arange(heads)[:, None]).reshape(-1)
    return cache.reshape(pages * heads, bs * dim).index_select(0, pages_read).view(batch, heads, n * bs, dim)


def fp32_dest(compute_kernel_config: WormholeComputeKernelConfig | None) -> bool:
    return bool(getattr(compute_kernel_config, "fp32_dest_acc_en", False))


def write_rows(cache: torch.Tensor, dtype: DataType, blk: torch.Tensor, off: torch.Tensor, rows: torch.Tensor,
               fp32_dest_acc_en: bool) -> None:
    """``cache[blk[u], :, off[u], :] = rows[u]`` as the decode update kernels do it.

    The kernel untilizes the 32-row tile holding the row to bf16 (fp32 with ``fp32_dest_acc_en``),
    replaces the row and re-packs the tile. BFP blocks are 16 values of one row, so the other rows of a
    bfp tile survive the re-pack unchanged; an FP32 cache without fp32 dest has its whole tile rounded to bf16.
    Users processed later win when two users write the same row (``share_cache``).
    """
    if len(blk) == 0:  # every user skipped (bfp._blocks cannot reshape an empty tensor)
        return
    keys = (blk * cache.shape[2] + off).tolist()  # a row per user: a set finds repeats faster than torch.unique
    if len(set(keys)) != len(keys):
        uniq, inverse = torch.unique(torch.tensor(keys), return_inverse=True)
        last = torch.full((len(uniq),), -1, dtype=torch.int64)
        last = last.scatter_reduce(0, inverse, torch.arange(len(keys)), "amax")
        blk, off, rows = blk[last], off[last], rows[last]
    if dtype == DataType.FLOAT32 and not fp32_dest_acc_en:
        tile_rows = ((off // TILE_SIZE * TILE_SIZE)[:, None] + torch.arange(TILE_SIZE)).clamp(max=cache.shape[2] - 1)
        cache[blk[:, None], :, tile_rows, :] = round_to_bfloat16(cache[blk[:, None], :, tile_rows, :])
        rows = round_to_bfloat16(rows)
    cache[blk, :, off, :] = quantize(rows, dtype, device_packer=True)


def paged_view(cache: Tensor, num_heads: int, block_size: int, head_dim: int, op: str) -> torch.Tensor:
    """The cache pages seen as ``[P, num_heads, block_size, head_dim]`` (geometry overrides), sharing storage."""
    p, h, bs, d = cache.padded_shape
    check(num_heads * block_size * head_dim == h * bs * d, op,
          lambda: f"{op} geometry mismatch: cache has {h * bs * d} elems/block (kv_heads={h}, block_size={bs}, "
                  f"head_dim={d}) but call view is {num_heads * block_size * head_dim} (kv_heads={num_heads}, "
                  f"block_size={block_size}, head_dim={head_dim}).")
    check(block_size % TILE_SIZE == 0, op,
          f"effective block_size ({block_size}) must be a multiple of TILE_HEIGHT ({TILE_SIZE})")
    if head_dim == d:  # keep the cache's logical head dim (D % 32 != 0 is tile padding)
        return cache.value.view(p, num_heads, block_size, cache.shape[3])
    check(cache.shape[3] == d, op,
          lambda: f"a head_dim override needs a tile-aligned cache head dim, got {cache.shape[3]}")
    return cache.value.view(p, num_heads, block_size, head_dim)


def _check_cache(cache: Tensor, op: str) -> None:
    check(cache.layout == Layout.TILE, op, "Cache tensor in update_cache must be tilized")
    check(cache.dtype in CACHE_DTYPES, op,
          f"Data type of cache tensor must be FLOAT32, BFLOAT16, BFLOAT8_B, or BFLOAT4_B and is {cache.dtype.name}")
    check(not cache.is_sharded(), op, "Only interleaved cache is supported")


def _check_decode_input(inp: Tensor, op: str) -> None:
    """The decode layout: ``[1, B, heads (tile rows), D]``, sharded one user per core."""
    check(inp.dtype in (DataType.FLOAT32, DataType.BFLOAT16), op,
          "Data type of input tensor for update cache must be FLOAT32 or BFLOAT16")
    check(len(inp.shape) == 4 and inp.shape[0] == 1, op, "Dim 0 of input tensor must be 1")
    check(inp.padded_shape[-1] % TILE_SIZE == 0, op,
          lambda: f"input_tensor last dim ({inp.padded_shape[-1]}) must be a multiple of TILE_WIDTH ({TILE_SIZE})")
    check(inp.is_sharded(), op, "Expect input_tensor to be sharded")
    mc = inp.memory_config()
    check(mc.memory_layout != TensorMemoryLayout.WIDTH_SHARDED, op,
          "Expect input_tensor to NOT have memory layout WIDTH SHARDED")
    spec = mc.shard_spec
    check(spec is not None, op, "a sharded input_tensor needs a shard spec")
    check(spec.shape[1] == inp.padded_shape[-1], op,
          lambda: f"Expect input_tensor to have shard width ({spec.shape[1]}) equal to the last dimension of the "
                  f"input tensor padded shape ({inp.padded_shape[-1]})")
    check(spec.orientation == ShardOrientation.ROW_MAJOR, op, "Only ROW_MAJOR sharding is supported")
    users = inp.shape[1]
    check(spec.num_cores() == users, op,
          lambda: f"Input tensor shard grid must have num_cores ({spec.num_cores()}) equal to the number of users / "
                  f"batch ({users}). The kernel dispatches one user per core")


def _positions(update_idxs: list[int], update_idxs_tensor: Tensor | None, users: int, op: str) -> torch.Tensor:
    check((update_idxs_tensor is not None) != (len(update_idxs) > 0), op,
          "Only an update tensor or an update vector can be provided. Not both or neither.")
    if update_idxs_tensor is None:
        pos = torch.tensor(list(update_idxs), dtype=torch.int64)
        check(bool((pos >= 0).all()), op, "update_idxs are uint32: the list form has no -1 skip")
    else:
        t = update_idxs_tensor
        check(t.dtype == DataType.INT32, op, "Expected update_idxs to have datatype INT32")
        check(t.layout == Layout.ROW_MAJOR, op, "Expected update_idxs to have memory layout in ROW MAJOR")
        if t.is_sharded():
            check(t.memory_config().memory_layout == TensorMemoryLayout.HEIGHT_SHARDED, op,
                  "Expect update_idxs to be HEIGHT SHARDED if sharded")
        else:
            check(t.memory_config().buffer_type == BufferType.DRAM, op, "Expect update_idxs to have buffer type DRAM")
        pos = t.value.reshape(-1).to(torch.int64)
    check(len(pos) == users, op, lambda: f"Number of update_idxs ({len(pos)}) should match batch size ({users})")
    return pos


# --- ops ------------------------------------------------------------------------------------------

def paged_update_cache(cache_tensor: Tensor, input_tensor: Tensor, *, update_idxs: list[int] = [],
                       update_idxs_tensor: Tensor | None = None, share_cache: bool | None = None,
                       page_table: Tensor | None = None, batch_offset: int = 0,
                       compute_kernel_config: WormholeComputeKernelConfig | None = None,
                       mesh_coords: object = None, block_size: int | None = None, num_kv_heads: int | None = None,
                       cache_position_modulo: int | None = None) -> Tensor:
    op = "paged_update_cache"
    _check_cache(cache_tensor, op)
    check(input_tensor.layout == Layout.TILE, op, "Input tensor in non-fused update_cache must be tilized")
    _update(cache_tensor, input_tensor, update_idxs, update_idxs_tensor, share_cache, page_table, batch_offset,
            compute_kernel_config, block_size, num_kv_heads, cache_position_modulo, op)
    return cache_tensor


def paged_fused_update_cache(cache_tensor1: Tensor, input_tensor1: Tensor, cache_tensor2: Tensor,
                             input_tensor2: Tensor, *, update_idxs: list[int] = [],
                             update_idxs_tensor: Tensor | None = None, share_cache: bool | None = None,
                             page_table: Tensor | None = None, batch_offset: int = 0,
                             compute_kernel_config: WormholeComputeKernelConfig | None = None,
                             mesh_coords: object = None) -> tuple[Tensor, Tensor]:
    op = "paged_fused_update_cache"
    for cache in (cache_tensor1, cache_tensor2):
        _check_cache(cache, op)
    check(input_tensor1.layout == input_tensor2.layout, op, "Both inputs must have the same layout")
    for inp in (input_tensor1, input_tensor2):
        _check_decode_input(inp, op)
    grid1 = input_tensor1.memory_config().shard_spec.grid
    grid2 = input_tensor2.memory_config().shard_spec.grid
    check(not grid1.intersects(grid2), op, "input_tensor1 and input_tensor2 must not have overlapping shard grids")
    check(grid1.num_cores() == grid2.num_cores(), op,
          "input_tensor1 and input_tensor2 must use the same number of cores")
    # The fused kernel validates both halves before writing either.
    args = (update_idxs, update_idxs_tensor, share_cache, page_table, batch_offset, compute_kernel_config,
            None, None, None, op)
    writes = [_update(c, i, *args, dry_run=True) for c, i in ((cache_tensor1, input_tensor1),
                                                              (cache_tensor2, input_tensor2))]
    for write in writes:
        write()
    return cache_tensor1, cache_tensor2


def _update(cache_tensor: Tensor, input_tensor: Tensor, update_idxs: list[int], update_idxs_tensor: Tensor | None,
            share_cache: bool | None, page_table: Tensor | None, batch_offset: int,
            compute_kernel_config: WormholeComputeKernelConfig | None, block_size: int | None,
            num_kv_heads: int | None, cache_position_modulo: int | None, op: str,
            dry_run: bool = False) -> Callable[[], None] | None:
    """Validate one cache update and perform it (or, with ``dry_run``, return a closure performing it)."""
    _check_decode_input(input_tensor, op)
    check(input_tensor.device() is cache_tensor.device(), op, "Operands to update_cache need to be on the same device!")
    users, dim = input_tensor.shape[1], input_tensor.shape[-1]
    paged = page_table is not None
    for name, value in (("block_size_override", block_size), ("num_kv_heads_override", num_kv_heads),
                        ("cache_position_modulo", cache_position_modulo)):
        check(value is None or paged, op, f"{name} is only supported in paged mode (when page_table is provided)")
    pos = _positions(update_idxs, update_idxs_tensor, users, op)
    check(batch_offset == 0, op, "batch_offset must be 0")
    if paged:
        check(not share_cache, op, "share_cache not supported with paged cache")
        check(update_idxs_tensor is not None, op, "Paged cache requires update_idxs tensor")
        bs = block_size if block_size is not None else cache_tensor.padded_shape[2]
        heads = num_kv_heads if num_kv_heads is not None else cache_tensor.shape[1]
        cache = paged_view(cache_tensor, heads, bs, input_tensor.padded_shape[-1], op)
        table = check_page_table(page_table, op, users)
        if cache_position_modulo is not None:
            check(cache_position_modulo > 0 and cache_position_modulo % bs == 0, op,
                  f"cache_position_modulo ({cache_position_modulo}) must be a positive multiple of effective "
                  f"block_size ({bs})")
            check(cache_position_modulo // bs <= cache.shape[0], op,
                  lambda: f"cache_position_modulo/block_size ({cache_position_modulo // bs}) must be <= max_num_blocks "
                          f"({cache.shape[0]})")
        else:
            check(table.shape[1] <= cache.shape[0], op,
                  lambda: f"max_num_blocks_per_seq must be less than max_num_blocks: max_num_blocks_per_seq="
                          f"{table.shape[1]}, max_num_blocks={cache.shape[0]}")
    else:
        cache = cache_tensor.value
        heads = cache.shape[1]
        check(dim == cache.shape[-1], op,
              lambda: f"Last dim of input tensor ({dim}) must match last dim of cache tensor ({cache.shape[-1]}) in "
                      "non-paged mode")
        if share_cache:
            check(cache.shape[0] == 1, op, "Share cache feature expects cache tensor to have batch of 1")
        else:
            check(users == cache.shape[0], op, "Expect batch in input tensor match the batch in cache tensor")
    check(input_tensor.shape[2] >= heads, op,
          lambda: f"input_tensor has {input_tensor.shape[2]} head rows, the cache view {heads} heads")

    # -1 in the index tensor skips the user; the uint32 list form was validated non-negative above. One position a
    # user: Python works them out faster than a torch op each.
    positions = pos.tolist()
    kept = [u for u, x in enumerate(positions) if x != -1]
    p = [positions[u] if cache_position_modulo is None else positions[u] % cache_position_modulo for u in kept]
    users_kept = torch.tensor(kept, dtype=torch.int64)
    if paged:
        vb = [x // bs for x in p]
        check(all(x >= 0 for x in p) and all(b < table.shape[1] for b in vb), op,
              lambda: f"update position outside the page table's {table.shape[1]} blocks of {bs}")
        blk = table[users_kept, torch.tensor(vb, dtype=torch.int64)]
        off = torch.tensor([x % bs for x in p], dtype=torch.int64)
        check_blocks(blk, cache.shape[0], op)
    else:
        check(all(0 <= x < cache.shape[2] for x in p), op,
              lambda: f"update index must be < the cache sequence length {cache.shape[2]}")
        off = torch.tensor(p, dtype=torch.int64)
        blk = torch.zeros_like(off) if share_cache else users_kept
    rows = input_tensor.float()[0, users_kept, :heads, :]
    fp32 = fp32_dest(compute_kernel_config)

    def write() -> None:
        tracked_write(cache_tensor.value, tuple(cache.shape), blk,
                      lambda: write_rows(cache, cache_tensor.dtype, blk, off, rows, fp32))

    if dry_run:
        return write
    write()
    return None


def paged_fill_cache(cache_tensor: Tensor, input_tensor: Tensor, page_table: Tensor, *,
                     batch_idx_tensor: Tensor | None = None, batch_idx: int = 0,
                     compute_kernel_config: WormholeComputeKernelConfig | None = None, mesh_coords: object = None,
                     block_size: int | None = None, cache_position_modulo: int | None = None,
                     valid_seq_len_tensor: Tensor | None = None) -> Tensor:
    op = "paged_fill_cache"
    check(cache_tensor.dtype in CACHE_DTYPES, op,
          lambda: f"Data type of cache tensor for paged_fill_cache must be FLOAT32, BFLOAT16, BFLOAT8_B, or "
                  f"BFLOAT4_B and is {cache_tensor.dtype.name}")
    check(input_tensor.dtype == cache_tensor.dtype, op,
          lambda: f"Input tensor dtype ({input_tensor.dtype.name}) must match cache tensor dtype "
                  f"({cache_tensor.dtype.name}) for paged_fill_cache; cast prefill K/V to the cache dtype before "
                  f"filling the paged cache.")
    check(cache_tensor.layout == Layout.TILE and input_tensor.layout == Layout.TILE, op,
          "cache and input must be in TILE layout")
    check(not input_tensor.is_sharded(), op, "Expect input_tensor to have memory layout INTERLEAVED")
    check(not page_table.is_sharded(), op, "Expect page_table_tensor to have memory layout INTERLEAVED")
    check(page_table.dtype == DataType.INT32, op, "Expect page_table_tensor to have datatype INT32")
    if cache_position_modulo is not None or valid_seq_len_tensor is not None:
        raise unsupported(op, "cache_position_modulo / valid_seq_len_tensor (ring-buffer fill)")
    table = page_table.value.to(torch.int64).reshape(page_table.shape[0], -1)
    check(batch_idx < table.shape[0], op, "Batch idx must be within the page_table batch size")
    n_in, heads, seq, _ = input_tensor.shape
    bs = block_size if block_size is not None else cache_tensor.padded_shape[2]
    cache = paged_view(cache_tensor, heads, bs, input_tensor.padded_shape[-1], op)
    padded_dim = input_tensor.padded_shape[-1]
    check(padded_dim % TILE_SIZE == 0, op,
          f"input_tensor last dim ({padded_dim}) must be a multiple of TILE_WIDTH ({TILE_SIZE})")
    padded_seq = input_tensor.padded_shape[2]
    check(padded_seq <= bs * table.shape[1], op,
          lambda: f"Input seq_len ({padded_seq}) must fit in max_num_blocks_per_seq ({table.shape[1]}) * block_size "
                  f"({bs})")
    if batch_idx_tensor is not None:
        t = batch_idx_tensor
        check(t.value.numel() == n_in, op,
              lambda: f"Batch idx tensor must have input_tensor batch dim ({n_in}) elements, got {t.value.numel()}")
        check(t.dtype in (DataType.UINT32, DataType.INT32), op, "Batch idx tensor must be an integer type")
        check(t.layout == Layout.ROW_MAJOR, op, "Batch idx tensor must be in ROW_MAJOR layout")
        check(not t.is_sharded(), op, "Batch idx tensor must have INTERLEAVED memory layout")
        check(t.memory_config().buffer_type == BufferType.DRAM, op, "Batch idx tensor must be DRAM-resident")
        rows = t.value.reshape(-1).to(torch.int64)
        check(bool(((rows >= 0) & (rows < table.shape[0])).all()), op,
              "Batch idx must be within the page_table batch size")
    else:
        check(n_in == 1, op, f"input batch {n_in} > 1 needs batch_idx_tensor")
        rows = torch.tensor([batch_idx])

    # Whole 32-row tiles are copied raw: the padding rows of the last tile land in the cache as zeros, and a
    # tile never straddles two blocks (bs % 32 == 0), so skipping -1 blocks row by row is skipping tiles.
    src = input_tensor.value
    if padded_seq != seq:
        src = torch.nn.functional.pad(src, (0, 0, 0, padded_seq - seq))
    s = torch.arange(padded_seq)
    blk = table[rows][:, s // bs]  # [n_in, padded_seq]
    used = blk != -1
    check_blocks(blk[used], cache.shape[0], op)
    i_idx, s_idx = torch.nonzero(used, as_tuple=True)

    def write() -> None:
        cache[blk[i_idx, s_idx], :, s_idx % bs, :] = src[i_idx, :, s_idx, :]

    tracked_write(cache_tensor.value, tuple(cache.shape), blk[used], write)
    return cache_tensor
