"""Host KV-cache writes (paged and non-paged) against explicit torch references and ttnn's goldens.

Caches are pools of blocks scattered through a random permutation; blocks no page-table entry names are NaN,
so a write to (or a read of) any of them shows up. Tolerances: the writes are exact. bf16/fp32 rows land
rounded to bf16 (fp32 kept with fp32_dest_acc_en into an FP32 cache); bfloat8_b rows are compared bit for bit
with the device-packer model (``bfp.pack_device``); raw fills compare bit for bit.
"""

import pytest
import torch
import ttnn
from hypothesis import given, settings, strategies as st

from tt_models.runtime import host
from tt_models.runtime.host import bfp

NAN = float("nan")
GRID = host.CoreCoord(8, 8)


@pytest.fixture(scope="module")
def dev():
    return host.open_device()


def sharded_decode_input(x: torch.Tensor, dtype, dev, first_core: int = 0):
    """``[1, B, H, D]`` height-sharded one user per core, as nlp_create_qkv_heads_decode makes it."""
    users, dim = x.shape[1], x.shape[3]
    cores = host.CoreRangeSet([host.CoreRange(host.CoreCoord(i % 8, i // 8), host.CoreCoord(i % 8, i // 8))
                               for i in range(first_core, first_core + users)])
    mc = host.MemoryConfig(host.TensorMemoryLayout.HEIGHT_SHARDED, host.BufferType.L1,
                           host.ShardSpec(cores, (32, dim), host.ShardOrientation.ROW_MAJOR))
    return host.from_torch(x, dtype, layout=host.TILE_LAYOUT, device=dev, memory_config=mc)


def int_tensor(values, dev):
    return host.from_torch(torch.as_tensor(values, dtype=torch.int32), host.int32, device=dev)


def paged_pool(g, users, nkv, bs, dim, nb, dtype, dev, extra=3):
    """A cache pool whose used blocks hold random values (rounded to dtype) and whose spare blocks are NaN."""
    blocks = users * nb + extra
    table = torch.randperm(blocks, generator=g)[:users * nb].reshape(users, nb).to(torch.int32)
    cache = host.from_torch(torch.randn(blocks, nkv, bs, dim, generator=g), dtype, layout=host.TILE_LAYOUT,
                            device=dev)
    spare = torch.ones(blocks, dtype=torch.bool)
    spare[table.flatten().long()] = False
    cache.value[spare] = NAN
    return cache, table


def expected_row(row: torch.Tensor, dtype, fp32_dest: bool) -> torch.Tensor:
    if dtype == host.float32:
        return row if fp32_dest else bfp.round_to_bfloat16(row)
    if dtype == host.bfloat8_b:
        return bfp.pack_device(row, 7)
    return bfp.round_to_bfloat16(row)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


# --- paged_update_cache ---------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(users=st.integers(1, 8), nkv=st.sampled_from([1, 2, 8]), dim=st.sampled_from([32, 64]),
       bs=st.sampled_from([32, 64]), nb=st.integers(1, 3),
       cache_dtype=st.sampled_from(["bfloat16", "bfloat8_b", "float32"]),
       in_dtype=st.sampled_from(["bfloat16", "float32"]), fp32_dest=st.booleans(), seed=st.integers(0, 2**16))
def test_paged_update_cache_matches_reference(dev, users, nkv, dim, bs, nb, cache_dtype, in_dtype, fp32_dest, seed):
    g = torch.Generator().manual_seed(seed)
    cache_dtype, in_dtype = getattr(host, cache_dtype), getattr(host, in_dtype)
    cache, table = paged_pool(g, users, nkv, bs, dim, nb, cache_dtype, dev)
    pos = torch.randint(0, nb * bs, (users,), generator=g)
    pos[torch.rand(users, generator=g) < 0.25] = -1  # skipped users
    x = sharded_decode_input(torch.randn(1, users, nkv, dim, generator=g), in_dtype, dev)
    expected = cache.value.clone()
    for b in range(users):
        p = int(pos[b])
        if p < 0:
            continue
        blk, off = int(table[b, p // bs]), p % bs
        if cache_dtype == host.float32 and not fp32_dest:  # the row's whole tile passes through bf16
            t0 = off // 32 * 32
            expected[blk, :, t0:t0 + 32] = bfp.round_to_bfloat16(expected[blk, :, t0:t0 + 32])
        expected[blk, :, off] = expected_row(x.value[0, b], cache_dtype, fp32_dest)
    config = host.WormholeComputeKernelConfig(math_fidelity=host.MathFidelity.HiFi4, fp32_dest_acc_en=fp32_dest)
    out = host.experimental.paged_update_cache(cache, x, update_idxs_tensor=int_tensor(pos, dev),
                                               page_table=int_tensor(table, dev), compute_kernel_config=config)
    assert out is cache
    assert same(cache.value, expected)


def test_paged_fused_update_cache_is_two_updates(dev):
    g = torch.Generator().manual_seed(1)
    users, nkv, dim, bs, nb = 4, 2, 64, 32, 2
    k_cache, table = paged_pool(g, users, nkv, bs, dim, nb, host.bfloat8_b, dev)
    v_cache = host.from_torch(torch.randn(k_cache.shape), host.bfloat8_b, layout=host.TILE_LAYOUT, device=dev)
    k_ref, v_ref = (host.Tensor(c.value.clone(), c.dtype, c.layout, dev) for c in (k_cache, v_cache))
    k, v = (torch.randn(1, users, nkv, dim, generator=g) for _ in range(2))
    pos, pt = int_tensor([0, 33, -1, 63], dev), int_tensor(table, dev)
    host.experimental.paged_fused_update_cache(k_cache, sharded_decode_input(k, host.bfloat16, dev), v_cache,
                                               sharded_decode_input(v, host.bfloat16, dev, first_core=users),
                                               update_idxs_tensor=pos, page_table=pt)
    host.experimental.paged_update_cache(k_ref, sharded_decode_input(k, host.bfloat16, dev), update_idxs_tensor=pos,
                                         page_table=pt)
    host.experimental.paged_update_cache(v_ref, sharded_decode_input(v, host.bfloat16, dev), update_idxs_tensor=pos,
                                         page_table=pt)
    assert same(k_cache.value, k_ref.value) and same(v_cache.value, v_ref.value)


def test_non_paged_update_with_share_cache_last_user_wins(dev):
    cache = host.from_torch(torch.zeros(1, 2, 64, 32), host.bfloat16, layout=host.TILE_LAYOUT, device=dev)
    x = torch.randn(1, 3, 2, 32)
    host.experimental.paged_update_cache(cache, sharded_decode_input(x, host.bfloat16, dev), update_idxs=[5, 7, 5],
                                         share_cache=True)
    assert torch.equal(cache.value[0, :, 5], bfp.round_to_bfloat16(x[0, 2]))
    assert torch.equal(cache.value[0, :, 7], bfp.round_to_bfloat16(x[0, 1]))


# --- paged_fill_cache -----------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(nkv=st.sampled_from([1, 2, 8]), dim=st.sampled_from([32, 64]), bs=st.sampled_from([32, 64]),
       nb=st.integers(1, 4), rows=st.integers(1, 3), dtype=st.sampled_from(["bfloat16", "bfloat8_b"]),
       use_tensor=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
def test_paged_fill_cache_matches_reference(dev, nkv, dim, bs, nb, rows, dtype, use_tensor, seed, data):
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(host, dtype)
    cache, table = paged_pool(g, rows, nkv, bs, dim, nb, dtype, dev)
    table[torch.rand(table.shape, generator=g) < 0.2] = -1  # unallocated blocks: their tiles are skipped
    seq = data.draw(st.integers(1, nb * bs), label="seq")
    n_in = data.draw(st.integers(1, rows), label="n_in") if use_tensor else 1
    batch_rows = torch.randperm(rows, generator=g)[:n_in]
    x = host.from_torch(torch.randn(n_in, nkv, seq, dim, generator=g), dtype, layout=host.TILE_LAYOUT, device=dev)
    padded = torch.nn.functional.pad(x.value, (0, 0, 0, -seq % 32))  # whole tiles: padding rows land as zeros
    expected = cache.value.clone()
    for i, r in enumerate(batch_rows.tolist()):
        for t in range(padded.shape[2] // 32):
            blk = int(table[r, t * 32 // bs])
            if blk != -1:
                off = t * 32 % bs
                expected[blk, :, off:off + 32] = padded[i, :, t * 32:t * 32 + 32]
    kwargs = ({"batch_idx_tensor": int_tensor(batch_rows, dev)} if use_tensor
              else {"batch_idx": int(batch_rows[0])})
    out = host.experimental.paged_fill_cache(cache, x, int_tensor(table, dev), **kwargs)
    assert out is cache
    assert same(cache.value, expected)


# --- non-paged fill_cache / update_cache against ttnn's goldens ----------------------------------

@pytest.mark.parametrize("seq, update_idx", [(32, 0), (45, 32), (7, 64)])
def test_fill_cache_matches_golden(dev, seq, update_idx):
    cache_t = torch.randn(3, 2, 128, 64)
    x = torch.randn(1, 2, seq, 64)
    cache = host.from_torch(cache_t, host.bfloat16, layout=host.TILE_LAYOUT, device=dev)
    host.fill_cache(cache, host.from_torch(x, host.bfloat16, layout=host.TILE_LAYOUT, device=dev), 1,
                    update_idx=update_idx)
    golden = ttnn.get_golden_function(ttnn.fill_cache)(bfp.round_to_bfloat16(cache_t), bfp.round_to_bfloat16(x), 1,
                                                       update_idx=update_idx)
    golden[1, :, update_idx + seq:update_idx + -(-seq // 32) * 32] = 0  # the tile's padding rows are copied too
    assert torch.equal(cache.value, golden)


@pytest.mark.parametrize("batch_offset", [0, 3])
def test_update_cache_matches_golden(dev, batch_offset):
    cache_t, x = torch.randn(4, 2, 64, 32), torch.randn(1, 2, 32, 32)
    cache = host.from_torch(cache_t, host.bfloat16, layout=host.TILE_LAYOUT, device=dev)
    host.update_cache(cache, host.from_torch(x, host.bfloat16, layout=host.TILE_LAYOUT, device=dev), 17,
                      batch_offset=batch_offset)
    golden = ttnn.get_golden_function(ttnn.update_cache)(bfp.round_to_bfloat16(cache_t), bfp.round_to_bfloat16(x), 17,
                                                         batch_offset=batch_offset)
    assert torch.equal(cache.value, golden)


# --- rejected calls -------------------------------------------------------------------------------

def _update_case(dev, **change):
    """A valid paged_update_cache call, with one thing changed."""
    users, nkv, dim, bs, nb = 4, 2, 64, 32, 2
    args = dict(cache=host.from_torch(torch.randn(10, nkv, bs, dim), host.bfloat8_b, layout=host.TILE_LAYOUT,
                                      device=dev),
                x=sharded_decode_input(torch.randn(1, users, nkv, dim), host.bfloat16, dev),
                kwargs=dict(update_idxs_tensor=int_tensor([0, 5, 40, -1], dev),
                            page_table=int_tensor(torch.arange(users * nb).reshape(users, nb), dev)))
    for key, value in change.items():
        if key in args:
            args[key] = value(dev) if callable(value) else value
        else:
            args["kwargs"][key] = value(dev) if callable(value) else value
    return args


UPDATE_REJECTS = {
    "interleaved input": dict(x=lambda d: host.from_torch(torch.randn(1, 4, 2, 64), host.bfloat16,
                                                          layout=host.TILE_LAYOUT, device=d)),
    "width sharded": dict(x=lambda d: host.from_torch(
        torch.randn(1, 4, 2, 64), host.bfloat16, layout=host.TILE_LAYOUT, device=d,
        memory_config=host.MemoryConfig(host.TensorMemoryLayout.WIDTH_SHARDED, host.BufferType.L1,
                                        host.ShardSpec(host.num_cores_to_corerangeset(2, GRID, True), (256, 32),
                                                       host.ShardOrientation.ROW_MAJOR)))),
    "cores != users": dict(x=lambda d: host.from_torch(
        torch.randn(1, 4, 2, 64), host.bfloat16, layout=host.TILE_LAYOUT, device=d,
        memory_config=host.MemoryConfig(host.TensorMemoryLayout.HEIGHT_SHARDED, host.BufferType.L1,
                                        host.ShardSpec(host.num_cores_to_corerangeset(2, GRID, True), (64, 64),
                                                       host.ShardOrientation.ROW_MAJOR)))),
    "bfloat8_b input": dict(x=lambda d: sharded_decode_input(torch.randn(1, 4, 2, 64), host.bfloat8_b, d)),
    "both index forms": dict(update_idxs=[0, 1, 2, 3]),
    "neither index form": dict(update_idxs_tensor=None),
    "paged with an index list": dict(update_idxs_tensor=None, update_idxs=[0, 1, 2, 3]),
    "index count != batch": dict(update_idxs_tensor=lambda d: int_tensor([0, 1, 2], d)),
    "index tensor not int32": dict(update_idxs_tensor=lambda d: host.from_torch(torch.zeros(4, dtype=torch.int64),
                                                                                host.uint32, device=d)),
    "page table rows != batch": dict(page_table=lambda d: int_tensor(torch.arange(6).reshape(3, 2), d)),
    "page table not int32": dict(page_table=lambda d: host.from_torch(torch.arange(8).reshape(4, 2), host.uint32,
                                                                      device=d)),
    "more blocks per seq than the pool": dict(page_table=lambda d: int_tensor(torch.zeros(4, 11), d)),
    "share_cache with paged": dict(share_cache=True),
    "batch_offset": dict(batch_offset=1),
    "position past the page table": dict(update_idxs_tensor=lambda d: int_tensor([0, 5, 64, -1], d)),
    "block outside the pool": dict(page_table=lambda d: int_tensor([[0, 1], [2, 3], [4, 10], [6, 7]], d)),
    "block_size not a multiple of 32": dict(block_size=16, num_kv_heads=4),  # same elems/block
    "modulo not block aligned": dict(cache_position_modulo=48),
}


@pytest.mark.parametrize("case", list(UPDATE_REJECTS))
def test_paged_update_cache_rejects(dev, case):
    args = _update_case(dev, **UPDATE_REJECTS[case])
    before = args["cache"].value.clone()
    with pytest.raises(host.TTFatal, match="paged_update_cache"):
        host.experimental.paged_update_cache(args["cache"], args["x"], **args["kwargs"])
    assert same(args["cache"].value, before)


def test_paged_update_cache_unaligned_head_dim_is_tile_padded(dev):
    """ttnn checks the padded head dim: D=48 pads to 64 and the logical 48 columns are written."""
    cache = host.from_torch(torch.zeros(4, 1, 32, 48), host.bfloat16, layout=host.TILE_LAYOUT, device=dev)
    x = torch.randn(1, 1, 1, 48)
    xt = host.from_torch(x, host.bfloat16, layout=host.TILE_LAYOUT, device=dev,
                         memory_config=host.MemoryConfig(
                             host.TensorMemoryLayout.HEIGHT_SHARDED, host.BufferType.L1,
                             host.ShardSpec(host.num_cores_to_corerangeset(1, GRID, True), (32, 64),
                                            host.ShardOrientation.ROW_MAJOR)))
    host.experimental.paged_update_cache(cache, xt, update_idxs_tensor=int_tensor([3], dev),
                                         page_table=int_tensor([[2]], dev))
    assert torch.equal(cache.value[2, 0, 3], bfp.round_to_bfloat16(x[0, 0, 0]))


@pytest.mark.parametrize("case", ["overlapping grids", "different core counts"])
def test_paged_fused_update_cache_rejects(dev, case):
    cache = host.from_torch(torch.randn(8, 1, 32, 32), host.bfloat16, layout=host.TILE_LAYOUT, device=dev)
    k = sharded_decode_input(torch.randn(1, 2, 1, 32), host.bfloat16, dev)
    v = (sharded_decode_input(torch.randn(1, 2, 1, 32), host.bfloat16, dev, first_core=1) if case == "overlapping grids"
         else sharded_decode_input(torch.randn(1, 3, 1, 32), host.bfloat16, dev, first_core=2))
    with pytest.raises(host.TTFatal, match="paged_fused_update_cache"):
        host.experimental.paged_fused_update_cache(cache, k, host.clone(cache), v,
                                                   update_idxs_tensor=int_tensor([0, 1], dev),
                                                   page_table=int_tensor([[0], [1]], dev))


FILL_REJECTS = {
    "dtype differs from the cache": dict(x_dtype=host.bfloat16),
    "sharded input": dict(sharded=True),
    "page table not int32": dict(table_dtype=host.uint32),
    "batch_idx past the page table": dict(kwargs=dict(batch_idx=2)),
    "input batch > 1 without batch_idx_tensor": dict(n_in=2),
    "sequence longer than the page table": dict(seq=97),
    "heads differ from the cache": dict(nkv=3),
    "block outside the pool": dict(table=[[0, 1, 2], [3, 4, 99]], kwargs=dict(batch_idx=1)),
}


@pytest.mark.parametrize("case", list(FILL_REJECTS))
def test_paged_fill_cache_rejects(dev, case):
    c = dict(x_dtype=host.bfloat8_b, sharded=False, table_dtype=host.int32, kwargs={}, n_in=1, seq=70, nkv=2,
             table=[[0, 1, 2], [3, 4, 5]])
    c.update(FILL_REJECTS[case])
    cache = host.from_torch(torch.randn(8, 2, 32, 64), host.bfloat8_b, layout=host.TILE_LAYOUT, device=dev)
    mc = None
    if c["sharded"]:
        mc = host.create_sharded_memory_config((c["n_in"], c["nkv"], c["seq"], 64), host.CoreGrid(x=1, y=1),
                                               host.ShardStrategy.HEIGHT)
    x = host.from_torch(torch.randn(c["n_in"], c["nkv"], c["seq"], 64), c["x_dtype"], layout=host.TILE_LAYOUT,
                        device=dev, memory_config=mc)
    table = host.from_torch(torch.tensor(c["table"]), c["table_dtype"], device=dev)
    before = cache.value.clone()
    with pytest.raises(host.TTFatal, match="paged_fill_cache"):
        host.experimental.paged_fill_cache(cache, x, table, **c["kwargs"])
    assert same(cache.value, before)
