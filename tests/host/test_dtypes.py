"""Host dtype rounding is bit-exact with the real ``ttnn.from_torch(..., layout=TILE) -> to_torch``."""

import pytest
import torch
import ttnn
from hypothesis import given, settings, strategies as st

from tt_models.runtime import host

DTYPES = [(host.bfloat8_b, ttnn.bfloat8_b), (host.bfloat4_b, ttnn.bfloat4_b), (host.bfloat16, ttnn.bfloat16)]
BLOCK = 16


def hard_values(n_blocks: int, seed: int) -> torch.Tensor:
    """``n_blocks`` 16-value blocks mixing the cases a BFP packer gets wrong, several inside each block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_blocks, BLOCK, generator=g)
    x = x * torch.exp2(torch.randint(-30, 30, (n_blocks, BLOCK), generator=g).float())
    kinds = torch.randint(0, 7, (n_blocks, BLOCK), generator=g)
    # exact ties at the 7-bit and 3-bit mantissa boundaries, relative to a power-of-two block max
    exps = torch.exp2(torch.randint(-8, 8, (n_blocks, 1), generator=g).float())
    tie8 = (torch.randint(0, 128, (n_blocks, BLOCK), generator=g).float() + 0.5) * exps / 64
    tie4 = (torch.randint(0, 8, (n_blocks, BLOCK), generator=g).float() + 0.5) * exps / 4
    x = torch.where(kinds == 1, tie8, x)
    x = torch.where(kinds == 2, tie4, x)
    x = torch.where(kinds == 3, torch.zeros_like(x), x)
    denormals = torch.full_like(x, 3e-39) * torch.sign(torch.randn(x.shape, generator=g))
    x = torch.where(kinds == 4, denormals, x)
    # values just below the next power of two: rounding up would overflow the block's shared exponent
    x = torch.where(kinds == 5, exps * (2 - torch.rand(x.shape, generator=g) * 2**-9), x)
    x = torch.where(kinds == 6, -x, x)
    x[:, 0] = exps[:, 0]  # every block holds its power-of-two max next to much smaller values
    return x


@pytest.mark.parametrize("host_dtype, real_dtype", DTYPES, ids=lambda d: getattr(d, "name", None))
@pytest.mark.parametrize("shape", [(131072 // 64, 64), (3, 37, 50)])
def test_packing_is_bit_exact_with_ttnn(host_dtype, real_dtype, shape):
    n = 1
    for d in shape:
        n *= d
    x = hard_values(-(-n // BLOCK), seed=n).flatten()[:n].reshape(shape)
    real = ttnn.to_torch(ttnn.from_torch(x, dtype=real_dtype, layout=ttnn.TILE_LAYOUT))
    mine = host.to_torch(host.from_torch(x, dtype=host_dtype, layout=host.TILE_LAYOUT))
    assert mine.dtype == real.dtype and mine.shape == real.shape
    mismatched = (mine.float().view(torch.int32) != real.float().view(torch.int32))
    assert not mismatched.any(), (f"{int(mismatched.sum())} of {n} values differ, "
                                  f"first at {mismatched.nonzero()[0].tolist()}")


def test_hard_values_cover_the_cases():
    """The generator really produces ties, zeros, denormals and near-overflow values in shared blocks."""
    x = hard_values(4096, seed=0)
    assert x.numel() >= 65536
    assert (x == 0).any(dim=1).float().mean() > 0.5
    assert ((x.abs() > 0) & (x.abs() < 1.2e-38)).any()
    frac8 = x / x[:, :1] * 64
    assert ((frac8 - frac8.floor()) == 0.5).any()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=BLOCK, max_size=4 * BLOCK))
def test_packing_matches_ttnn_on_arbitrary_floats(values):
    x = torch.tensor(values, dtype=torch.float32).reshape(1, -1)
    for host_dtype, real_dtype in DTYPES:
        real = ttnn.to_torch(ttnn.from_torch(x, dtype=real_dtype, layout=ttnn.TILE_LAYOUT))
        mine = host.to_torch(host.from_torch(x, dtype=host_dtype, layout=host.TILE_LAYOUT))
        assert torch.equal(mine.float().view(torch.int32), real.float().view(torch.int32)), host_dtype


@pytest.mark.parametrize("torch_dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.uint8])
def test_default_dtype_and_layout_follow_ttnn(torch_dtype):
    x = torch.arange(6, dtype=torch_dtype).reshape(2, 3)
    real, mine = ttnn.from_torch(x), host.from_torch(x)
    assert (mine.dtype.name, mine.layout.name) == (real.dtype.name, real.layout.name)
    assert host.to_torch(mine).dtype == ttnn.to_torch(real).dtype


def test_tile_layout_pads_shape_to_tiles():
    t = host.from_torch(torch.randn(2, 3, 40), dtype=host.bfloat16, layout=host.TILE_LAYOUT)
    real = ttnn.from_torch(torch.randn(2, 3, 40), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    assert list(t.shape) == list(real.shape) == [2, 3, 40]
    assert list(t.padded_shape) == list(real.padded_shape) == [2, 32, 64]


def test_block_float_needs_tile_layout():
    with pytest.raises(RuntimeError, match="TILE"):
        host.from_torch(torch.randn(4, 4), dtype=host.bfloat8_b, layout=host.ROW_MAJOR_LAYOUT)


def test_float64_is_rejected_with_a_clear_error():
    # (the real ttnn 0.81.1 aborts the process on float64 input; the host backend names the problem)
    with pytest.raises(TypeError, match="float64"):
        host.from_torch(torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("layout", ["ROW_MAJOR_LAYOUT", "TILE_LAYOUT"])
@pytest.mark.parametrize("given", [True, False], ids=["dtype-uint32", "dtype-default"])
def test_uint32_tensors_keep_their_values_as_in_ttnn(layout, given):
    """A torch.uint32 tensor (torch has no ``<`` for it: the check for negative values must skip it) becomes a uint32
    tensor whose values, those from 2**31 on too, come back as they went in."""
    x = torch.tensor([[0, 1, 2**31 - 1], [2**31, 2**31 + 5, 2**32 - 1]], dtype=torch.uint32)
    real = ttnn.from_torch(x, dtype=ttnn.uint32 if given else None, layout=getattr(ttnn, layout))
    mine = host.from_torch(x, dtype=host.uint32 if given else None, layout=getattr(host, layout))
    assert (mine.dtype.name, mine.layout.name) == (real.dtype.name, real.layout.name)
    real, mine = ttnn.to_torch(real), host.to_torch(mine)
    assert mine.dtype == real.dtype == torch.uint32 and mine.tolist() == real.tolist() == x.tolist()
