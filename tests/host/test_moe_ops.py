"""The host backend's ops a mixture of experts adds (``ge``, ``clamp``, ``sum``) against ttnn 0.81.1's torch golden
functions, on the same dtype-rounded inputs, with the tolerances of ``test_general_ops``."""

import pytest
import torch

from tests.host.test_general_ops import BF16, BFP8, FP32, assert_matches, golden, held, randn, tt
from tt_models.runtime import host


@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_ge_with_ties_and_broadcast(dtype):
    a = tt(torch.tensor([[1.0, 2.0, 3.0], [4.0, 2.0, 0.0]]), dtype)
    b = tt(torch.tensor([[2.0], [2.0]]), dtype)  # one threshold a row, as the router's k-th value
    assert_matches(host.ge(a, b), golden("ge")(held(a), held(b)).float(), dtype, exact=True)
    assert host.to_torch(host.ge(a, 2.0)).tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


@pytest.mark.parametrize("dtype", [BF16, BFP8, FP32])
@pytest.mark.parametrize("bounds", [(None, 7.0), (-7.0, 7.0), (-0.5, None)])
def test_clamp(dtype, bounds):
    x = tt(randn((2, 37, 65), 11) * 10, dtype)
    lo, hi = bounds
    assert_matches(host.clamp(x, min=lo, max=hi), golden("clamp")(held(x), min=lo, max=hi), dtype)


def test_clamp_needs_a_bound():
    with pytest.raises(RuntimeError, match="at least one of min and max"):
        host.clamp(tt(randn((32, 32), 1)))


@pytest.mark.parametrize("dtype", [BF16, FP32])
@pytest.mark.parametrize("dim, keepdim", [(-1, True), (-1, False), (2, True), (None, False)])
def test_sum(dtype, dim, keepdim):
    x = tt(randn((1, 2, 40, 70), 12), dtype)
    expected = golden("sum")(held(x), dim=dim, keepdim=keepdim)
    out = host.sum(x, dim=dim, keepdim=keepdim)
    assert tuple(out.shape) == tuple(expected.shape)
    assert_matches(out, expected, dtype)


def test_sum_rejects_a_dim_out_of_range():
    with pytest.raises(RuntimeError, match="out of range"):
        host.sum(tt(randn((32, 32), 1)), dim=2)
