"""The host backend's fast paths give the same bits as the plain formulations they replace.

Each fast path exists to cut per-op overhead (decode runs ~700 small ops a step): fewer torch passes in the device
packer, one ``index_select`` for a page gather, no second rounding of values that are moved, shapes built without
conversions, a decode tile's padding rows multiplied once. Each is checked here against the plain formulation on
inputs that include the awkward values (NaN, infinities, denormals, signed zeros) and the awkward layouts (views,
tile padding).
"""

import importlib

import pytest
import torch

from tt_models.runtime import host
from tt_models.runtime.host import bfp
from tt_models.runtime.host.paged_cache import gather_pages

matmul_module = importlib.import_module("tt_models.runtime.host.matmul")  # the package exports the op as "matmul"


def plain_pack_device(x: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """The device packer written out pass by pass, every special case masked explicitly."""
    blocks, width = bfp._blocks(bfp.round_to_bfloat16(x.to(torch.float32)).contiguous())
    bits = blocks.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    normal = exp != 0
    mag = torch.where(normal, ((bits >> 17) & 0x3F) | 0x40, torch.zeros_like(bits))
    shared = torch.where(normal, exp, torch.zeros_like(exp)).amax(dim=-1, keepdim=True)
    shift = torch.where(normal, shared - exp, torch.full_like(mag, 31)).clamp(max=31)
    q = ((((mag << 1) >> shift) + 1) >> 1).clamp(max=0x7F)
    q = torch.where(shift == 0, mag, q) >> (7 - mantissa_bits)
    scale = torch.pow(2.0, (shared - 127 - (mantissa_bits - 1)).to(torch.float32))
    value = q.to(torch.float32) * scale
    return bfp._unblock(torch.where((bits < 0) & (q != 0), -value, value), width)


def every_bfloat16(seed: int) -> torch.Tensor:
    """All 65536 bfloat16 bit patterns (NaNs, infinities, denormals, both zeros) in a random order, as fp32."""
    patterns = torch.arange(1 << 16, dtype=torch.int32) << 16
    order = torch.randperm(1 << 16, generator=torch.Generator().manual_seed(seed))
    return patterns[order].view(torch.float32)


@pytest.mark.parametrize("mantissa_bits", [7, 3])
@pytest.mark.parametrize("width", [16, 40, 64])
def test_device_packer_is_the_plain_formulation_bit_for_bit(mantissa_bits, width):
    g = torch.Generator().manual_seed(width)
    values = every_bfloat16(width)
    values = values[: len(values) // width * width].reshape(-1, width)
    # blocks of one scale (shifts 0..9 below the block max) and of wildly different scales (long shifts, flushes)
    near = torch.randn(256, width, generator=g) * torch.exp2(torch.randint(-9, 1, (256, width), generator=g).float())
    far = torch.randn(256, width, generator=g) * torch.exp2(torch.randint(-140, 128, (256, 1), generator=g).float())
    for x in (values, near, far, -far):
        got, expected = bfp.pack_device(x, mantissa_bits), plain_pack_device(x, mantissa_bits)
        assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


def test_page_gather_is_indexing_blocks_and_heads():
    g = torch.Generator().manual_seed(3)
    cache = torch.randn(12, 3, 32, 40, generator=g)
    cache[5, 1, 7, 2] = float("nan")
    table = torch.randint(0, 12, (5, 4), generator=g)
    expected = cache[table[:, None, :], torch.arange(3)[None, :, None]].reshape(5, 3, 4 * 32, 40)
    got = gather_pages(cache, table)
    assert got.is_contiguous() and torch.equal(got.view(torch.int32), expected.view(torch.int32))


@pytest.mark.parametrize("dtype", [host.bfloat16, host.float32, host.bfloat8_b, host.uint32])
def test_moved_values_are_what_rounding_them_again_gives(dtype):
    """Data movement keeps a tensor's values: rounding them again to its dtype is the identity, even for NaNs."""
    device = host.open_device(device_id=0)
    g = torch.Generator().manual_seed(5)
    if dtype == host.uint32:
        source = torch.randint(0, 2**31, (2, 3, 37, 20), generator=g)
    else:
        source = torch.randn(2, 3, 37, 20, generator=g) * 100
        specials = torch.tensor([float("nan"), float("inf"), -0.0, 1e-40])
        source.view(-1)[::97] = specials[torch.arange(source.numel())[::97] % 4]
    t = host.from_torch(source, dtype, layout=host.TILE_LAYOUT, device=device)
    for moved in (t.value.transpose(1, 2).contiguous(), t.value[:, 1:], t.value.reshape(6, 37, 20), t.value):
        got, expected = t.rearranged(moved), t.like(moved)
        assert got.dtype == expected.dtype and got.layout == expected.layout
        assert got.memory_config() == expected.memory_config()
        assert torch.equal(got.value.view(torch.uint8), expected.value.view(torch.uint8))
        # a new buffer, as like's rounding makes: writing in place to one leaves the other
        assert got.value.untyped_storage().data_ptr() != t.value.untyped_storage().data_ptr()
    host.close_device(device)


def test_shapes_are_plain_int_tuples():
    device = host.open_device(device_id=0)
    t = host.from_torch(torch.zeros(2, 3, 37, 20), host.bfloat16, layout=host.TILE_LAYOUT, device=device)
    assert t.shape == (2, 3, 37, 20) and type(t.shape) is host.Shape and t.shape.rank == 4
    assert t.padded_shape == (2, 3, 64, 32) and type(t.padded_shape) is host.Shape
    assert all(type(d) is int for d in (*t.shape, *t.padded_shape))
    rm = host.to_layout(t, host.ROW_MAJOR_LAYOUT)
    assert rm.padded_shape == rm.shape == (2, 3, 37, 20)
    host.close_device(device)


@pytest.mark.parametrize("threads", [1, 2, 8])
@pytest.mark.parametrize("k, n", [(576, 1536), (1536, 576), (384, 51865), (64, 96)])
def test_matmul_computes_repeated_rows_once_with_the_full_products_bits(k, n, threads, monkeypatch):
    """Rows that repeat the last one (a decode tile's padding) are computed once; every row keeps the bits the
    full 32-row product gives it, whatever the number of other rows (the GEMM is given a multiple of 4) and with
    rows that equal the last one in value but not in bits (0.0 beside -0.0), on the checked call and after it."""
    monkeypatch.setattr(matmul_module, "_ROWWISE_CHECKED", {})
    default_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(k + threads)
        w = torch.randn(1, 1, k, n, generator=g).bfloat16().float()
        for distinct in [0, 1, 2, 3, 5, 6, 9, 17, 23, 24]:
            x = torch.randn(1, 1, 32, k, generator=g).bfloat16().float()
            x[..., -1, :] = -0.0 if distinct % 2 else float("nan")
            x[..., distinct:, :] = x[..., -1:, :]
            if distinct:
                x[..., 0, :] = 0.0
            expected = torch.matmul(x, w)
            for _ in range(2):  # the first product of a shape is checked against the full one, later ones not
                got = matmul_module._rowwise_matmul(x, w)
                assert torch.equal(got.view(torch.int32), expected.view(torch.int32)), distinct
    finally:
        torch.set_num_threads(default_threads)


def test_decode_attention_computes_a_repeated_user_once_with_the_same_bits(monkeypatch):
    """Users whose query repeats the last user's over the same key set (a decode tile's padding rows) take its
    products; every row is what computing each user's own gives, bit for bit."""
    attention = importlib.import_module("tt_models.runtime.host.decode_attention")
    g = torch.Generator().manual_seed(11)
    batch, kv_heads, group, length, dim = 12, 2, 3, 96, 32
    keys, values = torch.randn(3, kv_heads, length, dim, generator=g), torch.randn(3, kv_heads, length, dim,
                                                                                    generator=g)
    query = torch.randn(batch, kv_heads * group, dim, generator=g)
    query[7:] = query[-1]
    key_set = torch.tensor([0, 1, 2, 0, 1, 2, 0, 2, 2, 1, 2, 2])  # row 9 repeats the query, not the key set
    keep = torch.rand(batch, length, generator=g) > 0.2
    keep[7:] = keep[-1]
    got = attention._decode_rows(query, list(keys), list(values), keep, None, None, None, True, key_set)
    monkeypatch.setattr(attention, "_repeats_of_last", lambda query, key_set: list(range(len(query))))
    expected = attention._decode_rows(query, list(keys), list(values), keep, None, None, None, True, key_set)
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
