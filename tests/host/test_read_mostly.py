"""Gathered KV sets kept between paged decode reads (``runtime/host/read_mostly.py``) are never stale: after any
sequence of paged writes, other writes and reads, every read equals, bit for bit, the same read of a fresh copy
of the caches (which has nothing kept)."""

from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from tt_models.runtime import host

BLOCKS, HEADS, BS, DIM, USERS, PER_USER = 12, 2, 32, 64, 4, 3


def tile(x: torch.Tensor, dev) -> host.Tensor:
    return host.from_torch(x, host.bfloat16, layout=host.TILE_LAYOUT, device=dev)


def ints(values, dev) -> host.Tensor:
    return host.from_torch(torch.as_tensor(values, dtype=torch.int32), host.int32, device=dev)


def decode_input(x: torch.Tensor, dev) -> host.Tensor:
    """``[1, USERS, HEADS, DIM]`` height-sharded one user per core, as the paged update ops take it."""
    cores = host.CoreRangeSet([host.CoreRange(host.CoreCoord(i, 0), host.CoreCoord(i, 0)) for i in range(USERS)])
    config = host.MemoryConfig(host.TensorMemoryLayout.HEIGHT_SHARDED, host.BufferType.L1,
                               host.ShardSpec(cores, (32, DIM), host.ShardOrientation.ROW_MAJOR))
    return host.from_torch(x, host.bfloat16, layout=host.TILE_LAYOUT, device=dev, memory_config=config)


def read(q, k, v, table, pos, dev) -> torch.Tensor:
    return host.transformer.paged_scaled_dot_product_attention_decode(q, k, v, ints(table, dev),
                                                                      cur_pos_tensor=ints(pos, dev)).value


step = st.one_of(
    st.tuples(st.just("read"), st.lists(st.integers(0, USERS - 1), min_size=USERS, max_size=USERS),
              st.lists(st.integers(-1, PER_USER * BS - 1), min_size=USERS, max_size=USERS)),
    st.tuples(st.just("update"), st.lists(st.integers(-1, PER_USER * BS - 1), min_size=USERS, max_size=USERS)),
    st.tuples(st.just("fill"), st.integers(0, USERS - 1)),
    st.tuples(st.just("poke"), st.integers(0, BLOCKS - 1)),  # a write no op reports: straight into the storage
)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=12), seed=st.integers(0, 2**16))
def test_every_read_equals_a_read_of_fresh_copies(steps, seed):
    dev = host.open_device()
    g = torch.Generator().manual_seed(seed)
    k, v = (tile(torch.randn(BLOCKS, HEADS, BS, DIM, generator=g), dev) for _ in range(2))
    tables = torch.randperm(BLOCKS, generator=g)[:USERS * PER_USER].reshape(USERS, PER_USER)
    for kind, *args in steps + [("read", list(range(USERS)), [PER_USER * BS - 1] * USERS)] * 2:
        if kind == "read":
            owners, pos = args
            q = tile(torch.randn(1, USERS, HEADS, DIM, generator=g), dev)
            fresh = [tile(c.value.clone(), dev) for c in (k, v)]
            table = tables[owners]  # users may share a table row, as a request's rows in a prefill
            assert torch.equal(read(q, k, v, table, pos, dev), read(q, *fresh, table, pos, dev))
        elif kind == "update":
            for cache in (k, v):
                rows = decode_input(torch.randn(1, USERS, HEADS, DIM, generator=g), dev)
                host.experimental.paged_update_cache(cache, rows, update_idxs_tensor=ints(args[0], dev),
                                                     page_table=ints(tables, dev))
        elif kind == "fill":
            for cache in (k, v):
                host.experimental.paged_fill_cache(
                    cache, tile(torch.randn(1, HEADS, PER_USER * BS, DIM, generator=g), dev), ints(tables, dev),
                    batch_idx=args[0])
        else:
            k.value[args[0]] = torch.randn(HEADS, BS, DIM, generator=g).bfloat16().float()
