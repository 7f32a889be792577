"""Host attention ops against ttnn's torch goldens (SDPA prefill / chunked / decode / paged decode); the head
reshapes and rotary embedding around them are ``test_heads_and_rotary_ops.py``'s.

Caches are pools of scattered blocks; blocks no page table names, and the rows of used blocks past each
user's position, are NaN: reading any of them would turn the output into NaN. Tolerances: the goldens run in
fp32 on the same (already quantized) inputs, so the only difference is the output rounding to Q's dtype:
PCC >= 0.999 and |diff| <= 2e-2 for bf16 caches, PCC >= 0.99 for bfloat8_b ones.
"""

import pytest
import torch
import ttnn
from hypothesis import given, settings, strategies as st

from tt_models.runtime import host
from tt_models.runtime.host import bfp

NAN = float("nan")
GRID = host.CoreCoord(8, 8)
PCC = {"bfloat16": 0.999, "bfloat8_b": 0.99}


@pytest.fixture(scope="module")
def dev():
    return host.open_device()


def pcc(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    if torch.equal(a, b):
        return 1.0
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


def assert_close(mine: host.Tensor, golden: torch.Tensor, dtype: str = "bfloat16") -> None:
    out = mine.value
    assert tuple(out.shape) == tuple(golden.shape)
    assert not out.isnan().any(), "NaN in the output: the op read a row it must not read"
    assert pcc(out, golden) >= PCC[dtype]
    if dtype == "bfloat16":
        assert (out - golden).abs().max() <= 2e-2


def tile(x, dtype, dev, **kw):
    return host.from_torch(x, getattr(host, dtype) if isinstance(dtype, str) else dtype, layout=host.TILE_LAYOUT,
                           device=dev, **kw)


def ints(values, dev):
    return host.from_torch(torch.as_tensor(values, dtype=torch.int32), host.int32, device=dev)


def golden(op):
    return ttnn.get_golden_function(op)


def paged_kv(g, users, nkv, bs, dim, nb, dtype, dev, valid_len=None):
    """K and V pools: used blocks random, spare blocks NaN, rows at or past ``valid_len[b]`` of user b NaN."""
    blocks = users * nb + 2
    table = torch.randperm(blocks, generator=g)[:users * nb].reshape(users, nb)
    pools = []
    for _ in range(2):
        pool = tile(torch.randn(blocks, nkv, bs, dim, generator=g), dtype, dev)
        used = torch.zeros(blocks, dtype=torch.bool)
        used[table.flatten()] = True
        pool.value[~used] = NAN
        if valid_len is not None:
            for b in range(users):
                for j in range(nb):
                    first = max(0, min(bs, int(valid_len[b]) - j * bs))
                    pool.value[table[b, j], :, first:] = NAN
        pools.append(pool)
    return pools[0], pools[1], table


def torch_values(t: host.Tensor) -> torch.Tensor:
    return t.value.clone()


# --- paged decode -----------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(users=st.integers(1, 5), nkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 4, 8]),
       dim=st.sampled_from([32, 64]), bs=st.sampled_from([32, 64]), nb=st.integers(1, 4),
       dtype=st.sampled_from(["bfloat16", "bfloat8_b"]), window=st.sampled_from([None, 20, 70]),
       seed=st.integers(0, 2**16))
def test_paged_decode_causal_matches_golden(dev, users, nkv, group, dim, bs, nb, dtype, window, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, nb * bs, (users,), generator=g)
    pos[torch.rand(users, generator=g) < 0.25] = -1
    k, v, table = paged_kv(g, users, nkv, bs, dim, nb, dtype, dev, valid_len=pos + 1)
    # Blocks past a user's position need not be allocated.
    table_dev = table.clone()
    for b in range(users):
        table_dev[b, (int(pos[b]) + 1 + bs - 1) // bs:] = -1
    q = tile(torch.randn(1, users, nkv * group, dim, generator=g), "bfloat16", dev)
    out = host.transformer.paged_scaled_dot_product_attention_decode(
        q, k, v, ints(table_dev, dev), cur_pos_tensor=ints(pos, dev), sliding_window_size=window, scale=0.3)
    ref = golden(ttnn.transformer.paged_scaled_dot_product_attention_decode)(
        torch_values(q), torch_values(k), torch_values(v), table, cur_pos_tensor=pos, sliding_window_size=window,
        scale=0.3)
    assert out.dtype == host.bfloat16
    assert_close(out, ref, dtype)
    assert not out.value[0, pos < 0].any(), "skipped users' rows stay zero"


@settings(max_examples=40, deadline=None)
@given(users=st.integers(1, 4), nkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 4]),
       bs=st.sampled_from([32, 64]), nb=st.integers(1, 4), dtype=st.sampled_from(["bfloat16", "bfloat8_b"]),
       mask_batch=st.booleans(), seed=st.integers(0, 2**16))
def test_paged_decode_non_causal_with_mask_matches_golden(dev, users, nkv, group, bs, nb, dtype, mask_batch, seed):
    g = torch.Generator().manual_seed(seed)
    heads, dim, length = nkv * group, 64, nb * bs
    k, v, table = paged_kv(g, users, nkv, bs, dim, nb, dtype, dev)
    q = tile(torch.randn(1, users, heads, dim, generator=g), "bfloat16", dev)
    # cross-attention style: each user sees a prefix of the keys, the rest masked with -inf
    seen = torch.randint(1, length + 1, (users if mask_batch else 1,), generator=g)
    mask = torch.where(torch.arange(length) < seen[:, None, None, None], 0.0, float("-inf"))
    mask = mask.expand(-1, 1, heads, length).contiguous()
    config = host.SDPAProgramConfig(compute_with_storage_grid_size=GRID, q_chunk_size=32, k_chunk_size=32)
    out = host.transformer.paged_scaled_dot_product_attention_decode(
        q, k, v, ints(table, dev), is_causal=False, attn_mask=tile(mask, "bfloat16", dev), program_config=config)
    ref = golden(ttnn.transformer.paged_scaled_dot_product_attention_decode)(
        torch_values(q), torch_values(k), torch_values(v), table, is_causal=False, attn_mask=mask)
    assert_close(out, ref, dtype)


@settings(max_examples=30, deadline=None)
@given(users=st.integers(2, 6), sets=st.integers(1, 3), nkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 4]),
       nb=st.integers(1, 3), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_paged_decode_users_sharing_blocks_equal_users_with_copies(dev, users, sets, nkv, group, nb, causal, seed):
    """Users whose page-table rows name the same blocks (a request's rows in a cross-attention prefill) get, bit
    for bit, what they get when each reads its own copy of those blocks: sharing saves copies, not accuracy."""
    g = torch.Generator().manual_seed(seed)
    bs, dim = 32, 64
    k, v, table = paged_kv(g, sets, nkv, bs, dim, nb, "bfloat16", dev)
    owner = torch.randint(0, sets, (users,), generator=g)
    shared = table[owner]
    # The copies: each user's blocks duplicated into fresh blocks at the end of the pools.
    copies = torch.arange(users * nb).reshape(users, nb) + k.shape[0]
    k2, v2 = (tile(torch.cat([c.value, c.value[shared.flatten()]]), "bfloat16", dev) for c in (k, v))
    q = tile(torch.randn(1, users, nkv * group, dim, generator=g), "bfloat16", dev)
    pos = torch.randint(-1, nb * bs, (users,), generator=g) if causal else None
    kwargs = dict(cur_pos_tensor=ints(pos, dev)) if causal else dict(
        is_causal=False, program_config=host.SDPAProgramConfig(compute_with_storage_grid_size=GRID,
                                                               q_chunk_size=32, k_chunk_size=32))
    out = host.transformer.paged_scaled_dot_product_attention_decode(q, k, v, ints(shared, dev), **kwargs)
    alone = host.transformer.paged_scaled_dot_product_attention_decode(q, k2, v2, ints(copies, dev), **kwargs)
    assert torch.equal(out.value, alone.value)


def test_paged_decode_attention_sink_matches_golden(dev):
    g = torch.Generator().manual_seed(3)
    pos = torch.tensor([5, 40, -1])
    k, v, table = paged_kv(g, 3, 2, 32, 64, 2, "bfloat16", dev, valid_len=pos + 1)
    q = tile(torch.randn(1, 3, 8, 64, generator=g), "bfloat16", dev)
    sink = torch.randn(8, 32, generator=g)
    out = host.transformer.paged_scaled_dot_product_attention_decode(
        q, k, v, ints(table, dev), cur_pos_tensor=ints(pos, dev), attention_sink=tile(sink, "bfloat16", dev))
    ref = golden(ttnn.transformer.paged_scaled_dot_product_attention_decode)(
        torch_values(q), torch_values(k), torch_values(v), table, cur_pos_tensor=pos,
        attention_sink=host.to_torch(tile(sink, "bfloat16", dev)).float())
    assert_close(out, ref)


def test_paged_decode_ring_buffer_matches_golden(dev):
    g = torch.Generator().manual_seed(4)
    k, v, table = paged_kv(g, 2, 1, 32, 32, 4, "bfloat16", dev)
    pos = torch.tensor([150, 20])  # user 0 wrapped around the 64-slot ring
    q = tile(torch.randn(1, 2, 4, 32, generator=g), "bfloat16", dev)
    out = host.transformer.paged_scaled_dot_product_attention_decode(
        q, k, v, ints(table, dev), cur_pos_tensor=ints(pos, dev), cache_position_modulo=64, sliding_window_size=40)
    ref = golden(ttnn.transformer.paged_scaled_dot_product_attention_decode)(
        torch_values(q), torch_values(k), torch_values(v), table, cur_pos_tensor=pos, cache_position_modulo=64,
        sliding_window_size=40)
    assert_close(out, ref)


def test_decode_step_reads_the_token_it_just_wrote(dev):
    """paged_update_cache then paged decode: cur_pos is inclusive, so the new token is attended."""
    g = torch.Generator().manual_seed(5)
    users, nkv, dim, bs = 3, 2, 64, 32
    k, v, table = paged_kv(g, users, nkv, bs, dim, 2, "bfloat8_b", dev)
    pos = ints([0, 31, 32], dev)
    mc = host.MemoryConfig(host.TensorMemoryLayout.HEIGHT_SHARDED, host.BufferType.L1,
                           host.ShardSpec(host.num_cores_to_corerangeset(users, GRID, True), (32, dim),
                                          host.ShardOrientation.ROW_MAJOR))
    new_v = torch.randn(1, users, nkv, dim, generator=g) * 100
    for cache, x in ((k, torch.zeros(1, users, nkv, dim)), (v, new_v)):
        host.experimental.paged_update_cache(cache, tile(x, "bfloat16", dev, memory_config=mc),
                                             update_idxs_tensor=pos, page_table=ints(table, dev))
    q = tile(torch.zeros(1, users, 8, dim), "bfloat16", dev)
    out = host.transformer.paged_scaled_dot_product_attention_decode(q, k, v, ints(table, dev), cur_pos_tensor=pos)
    # Uniform attention over positions 0..p: user 0 sees only the new token.
    written = bfp.pack_device(new_v[0, 0], 7)  # the row as the update packed it into the bfloat8_b cache
    assert torch.allclose(out.value[0, 0], written.repeat_interleave(4, dim=0), rtol=1e-3)


# --- unpaged decode -------------------------------------------------------------------------------

@pytest.mark.parametrize("share_cache", [False, True])
@pytest.mark.parametrize("group", [1, 4])
def test_decode_matches_golden(dev, share_cache, group):
    g = torch.Generator().manual_seed(6)
    users, nkv, seq, dim = 3, 2, 128, 64
    kb = 1 if share_cache else users
    k, v = (tile(torch.randn(kb, nkv, seq, dim, generator=g), "bfloat8_b", dev) for _ in range(2))
    q = tile(torch.randn(1, users, nkv * group, dim, generator=g), "bfloat16", dev)
    pos = [0, 77, 127]
    out = host.transformer.scaled_dot_product_attention_decode(q, k, v, cur_pos=pos, share_cache=share_cache)
    ref = golden(ttnn.transformer.scaled_dot_product_attention_decode)(
        torch_values(q), torch_values(k), torch_values(v), cur_pos=pos, share_cache=share_cache)
    assert_close(out, ref, "bfloat8_b")
    out_t = host.transformer.scaled_dot_product_attention_decode(q, k, v, cur_pos_tensor=ints([-1, 77, 127], dev),
                                                                 share_cache=share_cache)
    assert torch.equal(out_t.value[0, 1:], out.value[0, 1:]) and not out_t.value[0, 0].any()


# --- prefill --------------------------------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(batch=st.integers(1, 2), nkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 4, 8]),
       sq=st.integers(1, 100), sk=st.integers(1, 100), causal=st.booleans(), masked=st.booleans(),
       window=st.sampled_from([None, 16]), dtype=st.sampled_from(["bfloat16", "bfloat8_b"]),
       seed=st.integers(0, 2**16))
def test_sdpa_matches_golden(dev, batch, nkv, group, sq, sk, causal, masked, window, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    heads, dim = nkv * group, 64
    sk = sq if causal else sk
    q = tile(torch.randn(batch, heads, sq, dim, generator=g), dtype, dev)
    k, v = (tile(torch.randn(batch, nkv, sk, dim, generator=g), dtype, dev) for _ in range(2))
    mask = None
    if masked and not causal and window is None:
        mask = torch.where(torch.rand(batch, 1, sq, sk, generator=g) < 0.3, float("-inf"), 0.0)
        mask[..., 0] = 0.0  # every query sees at least one key
    out = host.transformer.scaled_dot_product_attention(
        q, k, v, is_causal=causal, attn_mask=None if mask is None else tile(mask, "bfloat16", dev),
        sliding_window_size=window)
    ref = golden(ttnn.transformer.scaled_dot_product_attention)(
        torch_values(q), torch_values(k), torch_values(v), is_causal=causal, attn_mask=mask, sliding_window_size=window)
    assert out.dtype == q.dtype
    assert_close(out, ref, dtype)


def test_sdpa_output_concat_heads(dev):
    q, k, v = (tile(torch.randn(1, 4, 64, 32), "bfloat16", dev) for _ in range(3))
    heads = host.transformer.scaled_dot_product_attention(q, k, v)
    concat = host.transformer.scaled_dot_product_attention(q, k, v, output_concat_heads=True)
    assert torch.equal(concat.value, heads.value.transpose(1, 2).reshape(1, 1, 64, 128))


@settings(max_examples=40, deadline=None)
@given(users=st.integers(1, 3), nkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 4]),
       bs=st.sampled_from([32, 64]), chunks=st.integers(0, 3), sq_tiles=st.integers(1, 3),
       use_tensor=st.booleans(), seed=st.integers(0, 2**16))
def test_chunked_sdpa_matches_golden(dev, users, nkv, group, bs, chunks, sq_tiles, use_tensor, seed):
    g = torch.Generator().manual_seed(seed)
    dim, sq = 64, sq_tiles * 32
    start = chunks * 32
    nb = -(-(start + sq) // bs) + 1  # one spare block per user past the chunk
    k, v, table = paged_kv(g, users, nkv, bs, dim, nb, "bfloat8_b", dev, valid_len=torch.full((users,), start + sq))
    q = tile(torch.randn(users, nkv * group, sq, dim, generator=g), "bfloat8_b", dev)
    kwargs = {"chunk_start_idx_tensor": ints([start], dev)} if use_tensor else {"chunk_start_idx": start}
    out = host.transformer.chunked_scaled_dot_product_attention(q, k, v, ints(table, dev), **kwargs)
    ref = golden(ttnn.transformer.chunked_scaled_dot_product_attention)(
        torch_values(q), torch_values(k), torch_values(v), table, start)
    assert_close(out, ref, "bfloat8_b")



@pytest.mark.parametrize("window", [None, 40])
def test_prefill_attention_sink_matches_golden(dev, window):
    """GPT-OSS's sinks in prefill: ``[1, NH, 1, 1]`` (scaled by ``scale`` as the golden does), with and without a
    window, from position 0 and as a later chunk over the paged cache."""
    g = torch.Generator().manual_seed(6)
    heads, nkv, dim, sq, scale = 8, 2, 64, 96, 0.25
    sink = tile(torch.randn(1, heads, 1, 1, generator=g) * 3, "bfloat16", dev)
    q = tile(torch.randn(1, heads, sq, dim, generator=g), "bfloat16", dev)
    k, v = (tile(torch.randn(1, nkv, sq, dim, generator=g), "bfloat16", dev) for _ in range(2))
    out = host.transformer.scaled_dot_product_attention(q, k, v, scale=scale, sliding_window_size=window,
                                                        attention_sink=sink)
    ref = golden(ttnn.transformer.scaled_dot_product_attention)(
        torch_values(q), torch_values(k), torch_values(v), scale=scale, sliding_window_size=window,
        attention_sink=torch_values(sink))
    assert_close(out, ref)
    pk, pv, table = paged_kv(g, 1, nkv, 32, dim, 4, "bfloat16", dev, valid_len=torch.tensor([128]))
    qc = tile(torch.randn(1, heads, 64, dim, generator=g), "bfloat16", dev)
    out = host.transformer.chunked_scaled_dot_product_attention(qc, pk, pv, ints(table, dev), 64, scale=scale,
                                                                sliding_window_size=window, attention_sink=sink)
    ref = golden(ttnn.transformer.chunked_scaled_dot_product_attention)(
        torch_values(qc), torch_values(pk), torch_values(pv), table, 64, scale=scale, sliding_window_size=window,
        attention_sink=torch_values(sink))
    assert_close(out, ref)

# --- rejected calls -------------------------------------------------------------------------------

def _decode_args(dev, **change):
    """A valid paged decode call (B=2, NH=8, NKV=2), with one thing changed."""
    users, nkv, bs, dim = 2, 2, 32, 64
    args = dict(q=tile(torch.randn(1, users, 8, dim), "bfloat16", dev),
                k=tile(torch.randn(6, nkv, bs, dim), "bfloat8_b", dev),
                v=tile(torch.randn(6, nkv, bs, dim), "bfloat8_b", dev),
                table=ints([[0, 1], [2, 3]], dev), kwargs=dict(cur_pos_tensor=ints([3, 40], dev)))
    for key, value in change.items():
        value = value(dev) if callable(value) else value
        if key in args:
            args[key] = value
        else:
            args["kwargs"][key] = value
    return args


DECODE_REJECTS = {
    "mask with causal": dict(attn_mask=lambda d: tile(torch.zeros(2, 1, 8, 64), "bfloat16", d)),
    "causal without cur_pos_tensor": dict(cur_pos_tensor=None),
    "cur_pos not int32": dict(cur_pos_tensor=lambda d: host.from_torch(torch.tensor([3, 40]), host.uint32, device=d)),
    "cur_pos count != batch": dict(cur_pos_tensor=lambda d: ints([3, 40, 5], d)),
    "page table rows != batch": dict(table=lambda d: ints([[0, 1]], d)),
    "page table not int32": dict(table=lambda d: host.from_torch(torch.tensor([[0, 1], [2, 3]]), host.uint32,
                                                                   device=d)),
    "heads not a multiple of kv heads": dict(q=lambda d: tile(torch.randn(1, 2, 7, 64), "bfloat16", d)),
    "GQA with bfloat8_b Q": dict(q=lambda d: tile(torch.randn(1, 2, 8, 64), "bfloat8_b", d)),
    "non-causal without k_chunk": dict(is_causal=False, cur_pos_tensor=None),
    "non-causal k_chunk not dividing": dict(is_causal=False, cur_pos_tensor=None, program_config=host.SDPAProgramConfig(
        compute_with_storage_grid_size=GRID, q_chunk_size=32, k_chunk_size=128)),
    "k_chunk not a power of 2": dict(program_config=host.SDPAProgramConfig(
        compute_with_storage_grid_size=GRID, q_chunk_size=32, k_chunk_size=96)),
    "K/V block sizes differ": dict(v=lambda d: tile(torch.randn(6, 2, 64, 64), "bfloat8_b", d)),
    "K not TILE": dict(k=lambda d: host.from_torch(torch.randn(6, 2, 32, 64), host.bfloat16, device=d)),
    "K in L1": dict(k=lambda d: tile(torch.randn(6, 2, 32, 64), "bfloat8_b", d, memory_config=host.L1_MEMORY_CONFIG)),
    "float32 Q": dict(q=lambda d: tile(torch.randn(1, 2, 8, 64), "float32", d)),
    "position past the page table": dict(cur_pos_tensor=lambda d: ints([3, 64], d)),
    "block outside the pool": dict(table=lambda d: ints([[0, 1], [2, 9]], d)),
}


@pytest.mark.parametrize("case", list(DECODE_REJECTS))
def test_paged_decode_rejects(dev, case):
    a = _decode_args(dev, **DECODE_REJECTS[case])
    with pytest.raises(host.TTFatal, match="paged_scaled_dot_product_attention_decode"):
        host.transformer.paged_scaled_dot_product_attention_decode(a["q"], a["k"], a["v"], a["table"], **a["kwargs"])


UNPAGED_DECODE_REJECTS = {
    "cur_pos past S": dict(cur_pos=[3, 64]),
    "S not a multiple of 32": dict(k=(2, 2, 48, 64)),
    "K batch != Q batch": dict(k=(3, 2, 64, 64)),
    "K and V lengths differ": dict(v=(2, 2, 32, 64)),
    "mask length != S": dict(is_causal=False, attn_mask=(2, 1, 8, 128)),
}


@pytest.mark.parametrize("case", list(UNPAGED_DECODE_REJECTS))
def test_decode_rejects(dev, case):
    c = dict(k=(2, 2, 64, 64), v=None, cur_pos=[3, 40])
    c.update(UNPAGED_DECODE_REJECTS[case])
    k = tile(torch.randn(c.pop("k")), "bfloat8_b", dev)
    v_shape = c.pop("v")
    v = k if v_shape is None else tile(torch.randn(v_shape), "bfloat8_b", dev)
    if "attn_mask" in c:
        c["attn_mask"], c["cur_pos"] = tile(torch.zeros(c["attn_mask"]), "bfloat16", dev), []
    q = tile(torch.randn(1, 2, 8, 64), "bfloat16", dev)
    with pytest.raises(host.TTFatal, match="scaled_dot_product_attention_decode"):
        host.transformer.scaled_dot_product_attention_decode(q, k, v, **c)


SDPA_REJECTS = {
    "causal with Sq != Sk": dict(k=(1, 2, 96, 64)),
    "causal with a mask": dict(attn_mask=(1, 1, 64, 64)),
    "mask with a window": dict(is_causal=False, attn_mask=(1, 1, 64, 64), sliding_window_size=16),
    "mask of the wrong shape": dict(is_causal=False, attn_mask=(1, 1, 64, 32)),
    "mask batch not 1 or B": dict(is_causal=False, attn_mask=(3, 1, 64, 64)),
    "sharded Q": dict(q_sharded=True),
    "row-major Q": dict(q_layout=host.ROW_MAJOR_LAYOUT),
    "head dim not tile aligned": dict(q=(1, 8, 64, 48), k=(1, 2, 64, 48)),
    "heads not a multiple of kv heads": dict(q=(1, 7, 64, 64)),
    "K and V shapes differ": dict(v=(1, 2, 32, 64)),
    "chunk not a multiple of 32": dict(program_config=host.SDPAProgramConfig(
        compute_with_storage_grid_size=GRID, q_chunk_size=48, k_chunk_size=32)),
    "decode-style [NH, 32] sink": dict(attention_sink=(8, 32)),
    "sink heads != Q heads": dict(attention_sink=(1, 4, 1, 1)),
}


@pytest.mark.parametrize("case", list(SDPA_REJECTS))
def test_sdpa_rejects(dev, case):
    c = dict(q=(1, 8, 64, 64), k=(1, 2, 64, 64), v=None, q_sharded=False, q_layout=host.TILE_LAYOUT)
    c.update(SDPA_REJECTS[case])
    mc = (host.create_sharded_memory_config(c["q"], host.CoreGrid(x=8, y=1), host.ShardStrategy.HEIGHT)
          if c.pop("q_sharded") else None)
    q = host.from_torch(torch.randn(c.pop("q")), host.bfloat16, layout=c.pop("q_layout"), device=dev, memory_config=mc)
    k = tile(torch.randn(c.pop("k")), "bfloat16", dev)
    v_shape = c.pop("v")
    v = k if v_shape is None else tile(torch.randn(v_shape), "bfloat16", dev)
    if "attn_mask" in c:
        c["attn_mask"] = tile(torch.zeros(c["attn_mask"]), "bfloat16", dev)
    if "attention_sink" in c:
        c["attention_sink"] = tile(torch.zeros(c["attention_sink"]), "bfloat16", dev)
    with pytest.raises(host.TTFatal, match="scaled_dot_product_attention"):
        host.transformer.scaled_dot_product_attention(q, k, v, **c)


CHUNKED_REJECTS = {
    "both start forms": dict(chunk_start_idx=0, chunk_start_idx_tensor=lambda d: ints([0], d)),
    "neither start form": dict(chunk_start_idx=None),
    "negative start": dict(chunk_start_idx=-32),
    "start tensor not int32": dict(chunk_start_idx=None, chunk_start_idx_tensor=lambda d: host.from_torch(
        torch.tensor([0]), host.uint32, device=d)),
    "page table rows != batch": dict(table=lambda d: ints([[0, 1, 2], [3, 4, 5]], d)),
    "kv_len < start + Sq": dict(chunk_start_idx=64),
    "start not a multiple of the chunk sizes": dict(chunk_start_idx=32, program_config=host.SDPAProgramConfig(
        compute_with_storage_grid_size=GRID, q_chunk_size=64, k_chunk_size=64)),
    "K/V block sizes differ": dict(v=lambda d: tile(torch.randn(8, 2, 64, 64), "bfloat8_b", d)),
}


@pytest.mark.parametrize("case", list(CHUNKED_REJECTS))
def test_chunked_sdpa_rejects(dev, case):
    a = dict(q=tile(torch.randn(1, 8, 64, 64), "bfloat8_b", dev), k=tile(torch.randn(8, 2, 32, 64), "bfloat8_b", dev),
             table=ints([[0, 1, 2]], dev), chunk_start_idx=32)
    a["v"] = a["k"]
    for key, value in CHUNKED_REJECTS[case].items():
        a[key] = value(dev) if callable(value) else value
    q, k, v, table = a.pop("q"), a.pop("k"), a.pop("v"), a.pop("table")
    start = a.pop("chunk_start_idx")
    with pytest.raises(host.TTFatal, match="chunked_scaled_dot_product_attention"):
        host.transformer.chunked_scaled_dot_product_attention(q, k, v, table, start, **a)
