"""The host backend's general ops (data movement, eltwise, matmul, normalization, embedding) against
ttnn 0.81.1's own torch golden functions, run on the same (already dtype-rounded) inputs.

It stays one module though long: every section holds its ops to their goldens with the one ``assert_matches`` and
the tolerances below, so split, its parts would share everything but their lists of ops.

Tolerances, on the output dtype (the host computes in fp32 and rounds once, as the device's packer does):
- float32: rtol 1e-5, atol 1e-5 x max|expected|, PCC >= 0.99999;
- bfloat16: rtol 1.6e-2 (a bit over 2 bf16 ulps), atol 1e-2 x max|expected|, PCC >= 0.9999;
- bfloat8_b: |error| <= 2^-5 x max|expected| (a shared 7-bit mantissa loses up to 2^-6 of the block max,
  doubled for the device/host packer difference), PCC >= 0.999.
Data movement on bfloat16 / float32 must be bit-exact (values only move).
"""

from __future__ import annotations

import math

import pytest
import torch
import ttnn as real
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models.runtime import host

BF16, BFP8, FP32 = host.bfloat16, host.bfloat8_b, host.float32
TILE, RM = host.TILE_LAYOUT, host.ROW_MAJOR_LAYOUT
FEW = settings(max_examples=12, deadline=None)
DEV = host.open_device(device_id=0)


def golden(name):
    op = real
    for part in name.split("."):
        op = getattr(op, part)
    return real.get_golden_function(op)


def tt(values, dtype=BF16, layout=TILE):
    return host.from_torch(values, dtype=dtype, layout=layout, device=DEV)


def held(tensor):
    """What a host tensor holds, as fp32 torch: the golden's input."""
    return host.to_torch(tensor).float()


def randn(shape, seed, lo=None):
    values = torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed))
    return values if lo is None else values.abs() + lo


def pcc(a, b):
    """Pearson correlation; 1 where it is undefined (constant data: the closeness check decides alone)."""
    a, b = a.flatten().double(), b.flatten().double()
    if a.numel() < 2 or a.std() == 0 or b.std() == 0:
        return 1.0
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


def assert_matches(out, expected, dtype, *, shape=None, layout=TILE, exact=False):
    """Output metadata, then values within the tolerance of ``dtype`` (see the module docstring)."""
    expected = expected.float()
    shape = tuple(expected.shape) if shape is None else tuple(shape)
    assert tuple(out.shape) == shape
    assert out.dtype == dtype and out.layout == layout
    padded = list(shape)
    if layout == TILE:
        padded[-2:] = [math.ceil(d / 32) * 32 for d in shape[-2:]]
    assert list(out.padded_shape) == padded
    actual = held(out)
    if exact and dtype != BFP8:
        assert torch.equal(actual, expected)
        return
    scale = float(expected.abs().max()) if expected.numel() else 1.0
    if dtype == FP32:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale)
        assert pcc(actual, expected) >= 0.99999
    elif dtype == BF16:
        torch.testing.assert_close(actual, expected, rtol=1.6e-2, atol=1e-2 * scale)
        assert pcc(actual, expected) >= 0.9999
    else:
        assert float((actual - expected).abs().max()) <= 2 ** -5 * scale
        assert pcc(actual, expected) >= 0.999


dims = st.integers(1, 70)
shapes4 = st.tuples(st.integers(1, 2), st.integers(1, 3), dims, dims)
float_dtypes = st.sampled_from([BF16, BFP8, FP32])
seeds = st.integers(0, 2 ** 16)


# --- data movement ------------------------------------------------------------------------------

@FEW
@given(shape=shapes4, dtype=float_dtypes, perm=st.permutations(range(4)), seed=seeds)
def test_permute_transpose_reshape(shape, dtype, perm, seed):
    x = tt(randn(shape, seed), dtype)
    ref = held(x)
    assert_matches(host.permute(x, perm), golden("permute")(ref, perm), dtype, exact=True)
    assert_matches(host.transpose(x, perm[0], -1), golden("transpose")(ref, perm[0], -1), dtype, exact=True)
    new_shape = (shape[0] * shape[1], shape[2], -1)
    assert_matches(host.reshape(x, new_shape), golden("reshape")(ref, new_shape), dtype, exact=True)


@FEW
@given(shape=shapes4, dtype=float_dtypes, dim=st.integers(-4, 3), extra=st.integers(1, 40), seed=seeds)
def test_concat(shape, dtype, dim, extra, seed):
    other = list(shape)
    other[dim] = extra
    a, b = tt(randn(shape, seed), dtype), tt(randn(other, seed + 1), dtype)
    assert_matches(host.concat([a, b], dim), golden("concat")([held(a), held(b)], dim), dtype, exact=True)


@pytest.mark.parametrize("dtype, layout", [(BF16, TILE), (host.uint32, RM)], ids=["bf16-tile", "uint32-rm"])
def test_copy_writes_in_place(dtype, layout):
    """``copy(a, b)`` writes a's values into b itself (a trace reading b sees them), as the golden's in-place mode
    does; how decode feedback writes the sampled tokens into the token input."""
    a, b = tt(torch.randint(0, 300, (1, 32)).float(), dtype, layout), tt(torch.zeros(1, 32), dtype, layout)
    assert host.copy(a, b) is None
    expected = golden("copy")(held(a), torch.zeros(1, 32), _ttnn_global_golden=True)
    assert torch.equal(held(b), expected)


@FEW
@given(shape=shapes4, dtype=st.sampled_from([BF16, FP32]), data=st.data(), seed=seeds)
def test_slice(shape, dtype, data, seed):
    starts = [data.draw(st.integers(0, d - 1)) for d in shape]
    ends = [data.draw(st.integers(s + 1, d)) for s, d in zip(starts, shape)]
    steps = [data.draw(st.integers(1, 3)) for _ in shape]
    x = tt(randn(shape, seed), dtype)
    assert_matches(host.slice(x, starts, ends, steps), golden("slice")(held(x), starts, ends, steps), dtype,
                   exact=True)
    assert_matches(host.slice(x, starts, ends), golden("slice")(held(x), starts, ends), dtype, exact=True)


@FEW
@given(shape=shapes4, dtype=float_dtypes, back=st.tuples(st.integers(0, 40), st.integers(0, 40)), seed=seeds)
def test_pad_tile_back(shape, dtype, back, seed):
    x = tt(randn(shape, seed), dtype)
    padding = [(0, back[0]), (0, back[1])]  # fewer pairs than dims pad the trailing dims
    assert_matches(host.pad(x, padding, 1.5), golden("pad")(held(x), padding, value=1.5), dtype, exact=True)


def test_pad_row_major_front():
    x = tt(randn((2, 5, 7), 0), BF16, RM)
    padding = [(0, 0), (3, 1), (2, 0)]
    assert_matches(host.pad(x, padding, -2.0), golden("pad")(held(x), padding, value=-2.0), BF16, layout=RM,
                   exact=True)


@FEW
@given(dtype=float_dtypes, layout=st.sampled_from([TILE, RM]), dim=st.integers(-4, 3), seed=seeds)
def test_squeeze_unsqueeze(dtype, layout, dim, seed):
    if dtype == BFP8:
        layout = TILE
    x = tt(randn((1, 3, 1, 33), seed), dtype, layout)
    ref = held(x)
    assert_matches(host.squeeze(x, dim), golden("squeeze")(ref, dim), dtype, layout=layout, exact=True)
    assert_matches(host.squeeze(x), golden("squeeze")(ref), dtype, layout=layout, exact=True)
    assert_matches(host.squeeze(x, [0, 2]), golden("squeeze")(ref, [0, 2]), dtype, layout=layout, exact=True)
    assert_matches(host.unsqueeze(x, dim), golden("unsqueeze")(ref, dim), dtype, layout=layout, exact=True)


@FEW
@given(shape=shapes4, dtype=float_dtypes, repeats=st.integers(1, 4), dim=st.integers(-4, 3),
       reps=st.tuples(st.integers(1, 2), st.integers(1, 3)), seed=seeds)
def test_repeat_interleave_and_repeat(shape, dtype, repeats, dim, reps, seed):
    x = tt(randn(shape, seed), dtype)
    ref = held(x)
    assert_matches(host.repeat_interleave(x, repeats, dim), golden("repeat_interleave")(ref, repeats, dim=dim),
                   dtype, exact=True)
    assert_matches(host.repeat(x, list(reps)), golden("repeat")(ref, list(reps)), dtype, exact=True)


# --- eltwise ------------------------------------------------------------------------------------

def _broadcast_pair(draw_shape, mask):
    return tuple(1 if m else d for d, m in zip(draw_shape, mask))


@FEW
@given(shape=shapes4, mask_a=st.tuples(*[st.booleans()] * 4), mask_b=st.tuples(*[st.booleans()] * 4),
       dtype_a=float_dtypes, dtype_b=float_dtypes, op=st.sampled_from(["add", "subtract", "multiply", "mul", "sub"]),
       seed=seeds)
def test_binary_broadcast(shape, mask_a, mask_b, dtype_a, dtype_b, op, seed):
    a = tt(randn(_broadcast_pair(shape, mask_a), seed), dtype_a)
    b = tt(randn(_broadcast_pair(shape, mask_b)[1:], seed + 1), dtype_b)  # lower rank too
    expected = golden(op)(held(a), held(b))
    assert_matches(getattr(host, op)(a, b), expected, dtype_a)
    assert_matches(getattr(host, op)(a, b, dtype=BF16), expected, BF16)


@pytest.mark.parametrize("dtype", [BF16, BFP8, FP32])
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "div"])
def test_binary_scalar_both_sides(op, dtype):
    x = tt(randn((2, 45, 70), 1, lo=0.5), dtype)
    assert_matches(getattr(host, op)(x, 2.5), golden(op)(held(x), 2.5), dtype)
    assert_matches(getattr(host, op)(3.0, x), golden(op)(3.0, held(x)), dtype)


@pytest.mark.parametrize("rounding_mode", [None, "trunc", "floor"])
def test_divide_tensors(rounding_mode):
    a, b = tt(randn((3, 40, 33), 2) * 4), tt(randn((1, 40, 1), 3, lo=0.5))
    expected = golden("divide")(held(a), held(b), rounding_mode=rounding_mode)
    assert_matches(host.divide(a, b, rounding_mode=rounding_mode), expected, BF16)


def test_binary_activations_match_golden():
    a, b = tt(randn((1, 1, 32, 96), 4)), tt(randn((1, 1, 32, 96), 5))
    silu, relu = host.UnaryOpType.SILU, host.UnaryWithParam(host.UnaryOpType.RELU)
    expected = golden("multiply")(held(a), held(b), input_tensor_a_activations=[real.UnaryOpType.SILU],
                                  activations=[real.UnaryOpType.RELU])
    out = host.multiply(a, b, input_tensor_a_activations=[silu], activations=[relu], dtype=BFP8)
    assert_matches(out, expected, BFP8)
    expected = golden("add")(held(a), held(b), input_tensor_b_activations=[real.UnaryOpType.GELU])
    assert_matches(host.add(a, b, input_tensor_b_activations=["gelu"]), expected, BF16)


def test_eq_and_where():
    a = tt(torch.tensor([[1.0, 2.0, 3.0], [4.0, 2.0, 0.0]]))
    b = tt(torch.tensor([[1.0, 0.0, 3.0]]))
    mask = host.eq(a, b)
    assert_matches(mask, golden("eq")(held(a), held(b)).float(), BF16, exact=True)
    assert_matches(host.eq(a, 2.0), golden("eq")(held(a), 2.0).float(), BF16, exact=True)
    expected = golden("where")(held(mask), held(a), -1.0)
    assert_matches(host.where(mask, a, -1.0), expected, BF16, exact=True)


def test_integer_add_is_exact():
    """uint32 sums beyond float32's 24-bit mantissa stay exact."""
    x = host.from_torch(torch.tensor([[3_000_000_001, 7]]), dtype=host.uint32, layout=TILE, device=DEV)
    out = host.add(x, 2)
    assert out.dtype == host.uint32
    assert host.to_torch(out).to(torch.int64).tolist() == [[3_000_000_003, 9]]


UNARY = {
    "neg": {}, "exp": {}, "gelu": {}, "silu": {}, "relu": {}, "sigmoid": {}, "tanh": {},
    "rsqrt": {"lo": 0.1}, "sqrt": {"lo": 0.0}, "reciprocal": {"lo": 0.5},
}


@pytest.mark.parametrize("dtype", [BF16, BFP8, FP32])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, dtype):
    x = tt(randn((2, 37, 65), 7, **UNARY[op]), dtype)
    assert_matches(getattr(host, op)(x), golden(op)(held(x)), dtype)


def test_gelu_approximate_is_tanh_form():
    x = tt(randn((40, 40), 8))
    expected = torch.nn.functional.gelu(held(x), approximate="tanh")
    assert_matches(host.gelu(x, fast_and_approximate_mode=True), expected, BF16)


def test_unary_output_tensor_and_memory_config():
    x = tt(randn((32, 64), 9))
    out = tt(torch.zeros(32, 64), FP32)
    result = host.exp(x, output_tensor=out, memory_config=host.L1_MEMORY_CONFIG)
    assert result is out and out.dtype == FP32
    torch.testing.assert_close(held(out), torch.exp(held(x)))


# --- matmul / linear -----------------------------------------------------------------------------

@FEW
@given(m=dims, k=dims, n=dims, batch=st.sampled_from([(), (1,), (2,), (1, 3)]), dtype_a=float_dtypes,
       dtype_b=float_dtypes, transpose_b=st.booleans(), seed=seeds)
def test_matmul(m, k, n, batch, dtype_a, dtype_b, transpose_b, seed):
    a = tt(randn(batch + (m, k), seed), dtype_a)
    b_shape = (n, k) if transpose_b else (k, n)
    b = tt(randn(b_shape, seed + 1) / math.sqrt(k), dtype_b)
    out = host.matmul(a, b, transpose_b=transpose_b)
    expected = golden("matmul")(held(a), held(b), transpose_b=transpose_b)
    assert_matches(out, expected, dtype_a)
    assert out.memory_config() == host.DRAM_MEMORY_CONFIG


def test_batched_matmul_and_transpose_a():
    a, b = tt(randn((2, 3, 40, 64), 10)), tt(randn((2, 3, 40, 50), 11))
    expected = golden("matmul")(held(a), held(b), transpose_a=True)
    assert_matches(host.matmul(a, b, transpose_a=True, dtype=FP32), expected, FP32)
    ones = tt(randn((1, 1, 40, 64), 12))  # a with unit batch, reused across b's batches
    assert_matches(host.matmul(ones, b, transpose_a=True), golden("matmul")(held(ones), held(b), transpose_a=True),
                   BF16)


@FEW
@given(m=dims, k=dims, n=dims, dtype_w=st.sampled_from([BF16, BFP8]), rank4=st.booleans(),
       activation=st.sampled_from([None, "gelu", "silu", "relu"]), seed=seeds)
def test_linear(m, k, n, dtype_w, rank4, activation, seed):
    lead = (1, 1) if rank4 else ()
    x = tt(randn(lead + (m, k), seed))
    w = tt(randn((k, n), seed + 1) / math.sqrt(k), dtype_w)
    bias = tt(randn(lead + (1, n), seed + 2), dtype_w)
    out = host.linear(x, w, bias=bias, activation=activation, dtype=BFP8, memory_config=host.L1_MEMORY_CONFIG)
    expected = golden("linear")(held(x), held(w), bias=held(bias), activation=activation)
    assert_matches(out, expected, BFP8)
    assert out.memory_config() == host.L1_MEMORY_CONFIG


def test_linear_program_config_fused_activation():
    x, w = tt(randn((1, 1, 32, 64), 13)), tt(randn((64, 96), 14) / 8)
    kwargs = dict(in0_block_w=1, per_core_M=1, per_core_N=2)
    config = host.MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig(**kwargs,
                                                                          fused_activation=host.UnaryOpType.SILU)
    real_config = real.MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig(**kwargs,
                                                                             fused_activation=real.UnaryOpType.SILU)
    expected = golden("linear")(held(x), held(w), program_config=real_config)
    # The DRAM-sharded program's layouts: the activation width-sharded in L1 (2 cores), the weight over the DRAM banks.
    x_sharded = host.to_memory_config(x, host.create_sharded_memory_config(
        (32, 32), host.CoreGrid(x=2, y=1), host.ShardStrategy.WIDTH, use_height_and_width_as_shard_shape=True))
    banks = host.CoreRangeSet([host.CoreRange(host.CoreCoord(0, 0), host.CoreCoord(11, 0))])
    w_sharded = host.to_memory_config(w, host.MemoryConfig(
        host.TensorMemoryLayout.WIDTH_SHARDED, host.BufferType.DRAM,
        host.ShardSpec(banks, (64, 32), host.ShardOrientation.ROW_MAJOR)))
    out = host.linear(x_sharded, w_sharded, program_config=config, memory_config=host.L1_WIDTH_SHARDED_MEMORY_CONFIG)
    assert_matches(out, expected, BF16)
    assert out.memory_config().shard_spec.shape == [32, 64]  # the activation's 2 cores, per_core_N tiles each
    grid = host.CoreCoord(8, 8)
    for cfg in (host.MatmulMultiCoreReuseProgramConfig(compute_with_storage_grid_size=grid, in0_block_w=2,
                                                       out_subblock_h=1, out_subblock_w=1, per_core_M=1,
                                                       per_core_N=1),
                host.MatmulMultiCoreReuseMultiCastProgramConfig(compute_with_storage_grid_size=grid, in0_block_w=2,
                                                                out_subblock_h=1, out_subblock_w=1, per_core_M=1,
                                                                per_core_N=1, transpose_mcast=False),
                host.MatmulMultiCoreReuseMultiCast1DProgramConfig(compute_with_storage_grid_size=grid,
                                                                  in0_block_w=2, out_subblock_h=1, out_subblock_w=1,
                                                                  per_core_M=1, per_core_N=1, fuse_batch=True,
                                                                  fused_activation=None, mcast_in0=True)):
        assert_matches(host.linear(x, w, program_config=cfg), golden("linear")(held(x), held(w)), BF16)


# --- normalization -------------------------------------------------------------------------------

@FEW
@given(shape=shapes4, dtype=float_dtypes, dim=st.integers(-4, 3), seed=seeds)
def test_softmax(shape, dtype, dim, seed):
    x = tt(randn(shape, seed) * 3, dtype)
    assert_matches(host.softmax(x, dim), golden("softmax")(held(x), dim), dtype)
    assert_matches(host.softmax(x), golden("softmax")(held(x)), dtype)


def test_softmax_in_place_writes_input():
    x = tt(randn((1, 2, 40, 50), 15))
    expected = golden("softmax_in_place")(held(x))
    out = host.softmax_in_place(x)
    assert out is x
    assert_matches(out, expected, BF16)


@FEW
@given(rows=dims, width=st.sampled_from([32, 64, 96, 40, 70]), dtype=float_dtypes, residual=st.booleans(),
       with_bias=st.booleans(), seed=seeds)
def test_rms_and_layer_norm(rows, width, dtype, residual, with_bias, seed):
    x = tt(randn((1, 1, rows, width), seed) * 2 + 0.5, dtype)
    res = tt(randn((1, 1, rows, width), seed + 1), dtype) if residual else None
    weight = tt(randn((1, width), seed + 2, lo=0.5))
    bias = tt(randn((1, width), seed + 3)) if with_bias else None
    ref = dict(residual_input_tensor=held(res) if residual else None, bias=held(bias) if with_bias else None)
    expected = golden("rms_norm")(held(x), held(weight), epsilon=1e-5, **ref)
    out = host.rms_norm(x, epsilon=1e-5, weight=weight, bias=bias, residual_input_tensor=res)
    assert_matches(out, expected, dtype)
    expected = golden("layer_norm")(held(x).clone(), epsilon=1e-6, weight=held(weight).reshape(-1),
                                    **{**ref, "bias": ref["bias"].reshape(-1) if with_bias else None})
    out = host.layer_norm(x, epsilon=1e-6, weight=weight, bias=bias, residual_input_tensor=res)
    assert_matches(out, expected, dtype)


def test_norm_defaults_and_row_major_weight():
    """ttnn's models pass gamma ROW_MAJOR as [1, 1, D/32, 32]; ttnn's default epsilon is 1e-12."""
    d = 128
    x = tt(randn((1, 1, 5, d), 16))
    gamma = randn((d,), 17, lo=0.5)
    weight = tt(gamma.reshape(1, 1, d // 32, 32), BF16, RM)
    expected = golden("rms_norm")(held(x), held(weight).reshape(d))
    assert_matches(host.rms_norm(x, weight=weight), expected, BF16)
    plain = golden("rms_norm")(held(x), epsilon=1e-12)
    assert_matches(host.rms_norm(x), plain, BF16)
    assert_matches(host.layer_norm(x, weight=weight),
                   golden("layer_norm")(held(x), weight=held(weight).reshape(d)), BF16)


# --- embedding -----------------------------------------------------------------------------------

@FEW
@given(batch=st.integers(1, 3), seq=st.integers(1, 70), vocab=st.integers(2, 100),
       width=st.sampled_from([32, 64, 40]), four_d=st.booleans(), seed=seeds)
def test_embedding(batch, seq, vocab, width, four_d, seed):
    index = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))
    idx_shape = (batch, 1, 1, seq) if four_d else (batch, seq)
    ids = host.from_torch(index.reshape(idx_shape), dtype=host.uint32, device=DEV)
    table = tt(randn((vocab, width), seed), BF16, RM)
    expected = golden("embedding")(index, held(table))
    assert_matches(host.embedding(ids, table), expected, BF16, layout=RM, exact=True)
    tiled = host.embedding(ids, table, layout=TILE, dtype=BFP8, padding_idx=0)
    assert_matches(tiled, expected, BFP8)


def test_embedding_layout_defaults_to_weight_layout():
    ids = host.from_torch(torch.tensor([[3, 0, 1]]), dtype=host.uint32, device=DEV)
    table = tt(randn((4, 32), 18), BF16, TILE)
    out = host.embedding(ids, table)
    assert_matches(out, held(table)[torch.tensor([[3, 0, 1]])], BF16, layout=TILE, exact=True)


def test_plus_one_writes_its_input():
    """A decode step's positions advanced in place (skipping padding rows' -1, and INT32_MAX, with
    ``skip_negative_entries``), int32 wrapping at its range otherwise, as the real op does."""
    for dtype, skip, values, expected in ((host.int32, True, [3, -1, 0, 2**31 - 1], [4, -1, 1, 2**31 - 1]),
                                          (host.int32, False, [3, -1, 0, 2**31 - 1], [4, 0, 1, -2**31]),
                                          (host.uint32, False, [3, 0, 2**32 - 1], [4, 1, 0])):
        t = host.from_torch(torch.tensor([values], dtype=torch.int64), dtype=dtype, layout=RM, device=DEV)
        assert host.plus_one(t, skip_negative_entries=skip) is t
        assert host.to_torch(t).to(torch.int64).tolist() == [expected]


# --- validation ----------------------------------------------------------------------------------

def _invalid_calls():
    """Each case: (error type, call, message pattern). RuntimeError = ttnn validation, NotImplementedError =
    accepted by ttnn but not modelled by the host backend."""
    a, w, w_ok = tt(randn((1, 1, 32, 64), 0)), tt(randn((48, 32), 1)), tt(randn((64, 32), 5))
    rm = tt(randn((32, 64), 2), BF16, RM)
    off_device = host.from_torch(randn((32, 64), 3), dtype=BF16, layout=TILE)
    ids_oob = host.from_torch(torch.tensor([[1, 9]]), dtype=host.uint32, device=DEV)
    ids = host.from_torch(torch.tensor([[1, 3]]), dtype=host.uint32, device=DEV)
    ids_3d = host.from_torch(torch.zeros(1, 2, 3, dtype=torch.int64), dtype=host.uint32, device=DEV)
    table = tt(randn((4, 32), 4), BF16, RM)
    ints = host.from_torch(torch.ones(1, 1, 32, 64, dtype=torch.int32), dtype=host.int32, device=DEV)
    height = host.create_sharded_memory_config((1, 1, 32, 64), host.CoreGrid(x=1, y=1), host.ShardStrategy.HEIGHT)
    return {
        "matmul_inner_dims": (RuntimeError, lambda: host.matmul(a, w), "K=64.*K=48"),
        "matmul_row_major": (RuntimeError, lambda: host.matmul(rm, w_ok), "TILE"),
        "matmul_batch_mismatch": (RuntimeError, lambda: host.matmul(tt(randn((2, 32, 64), 0)),
                                                                    tt(randn((3, 64, 32), 0))), "batch"),
        "linear_off_device": (RuntimeError, lambda: host.linear(off_device, w_ok), "device"),
        "linear_bad_bias": (RuntimeError, lambda: host.linear(a, w_ok, bias=tt(randn((2, 32), 6))), "bias"),
        "unknown_activation": (RuntimeError, lambda: host.linear(a, w_ok, activation="foo"), "Unknown unary op"),
        "softmax_row_major": (RuntimeError, lambda: host.softmax(rm), "TILE"),
        "rms_residual_shape": (RuntimeError, lambda: host.rms_norm(a, residual_input_tensor=tt(randn((64, 64), 0))),
                               "residual"),
        "rms_row_major_weight": (RuntimeError, lambda: host.rms_norm(a, weight=tt(randn((1, 64), 0), BF16, RM)),
                                 "ROW_MAJOR weight"),
        "rms_height_sharded": (RuntimeError, lambda: host.rms_norm(host.to_memory_config(a, height)), "height-sharded"),
        "binary_no_broadcast": (RuntimeError, lambda: host.add(a, tt(randn((1, 1, 32, 48), 0))), "broadcast"),
        "binary_int_float": (RuntimeError, lambda: host.add(a, ints), "dtypes"),
        "reshape_volume": (RuntimeError, lambda: host.reshape(a, (3, 64)), "volume"),
        "concat_shapes": (RuntimeError, lambda: host.concat([a, tt(randn((1, 2, 30, 64), 0))], 2), "differ"),
        "concat_dtypes": (RuntimeError, lambda: host.concat([a, tt(randn((1, 1, 32, 64), 0), FP32)], 2), "dtype"),
        "slice_bounds": (RuntimeError, lambda: host.slice(a, (0, 0, 0, 0), (1, 1, 33, 64)), "out of bounds"),
        "slice_bfp8_step": (RuntimeError, lambda: host.slice(tt(randn((32, 64), 0), BFP8), (0, 0), (32, 64), (1, 2)),
                            "bfloat8_b"),
        "pad_front_tile": (RuntimeError, lambda: host.pad(a, [(0, 0), (0, 0), (1, 0), (0, 0)], 0.0), "front"),
        "permute_bad_dims": (RuntimeError, lambda: host.permute(a, (0, 1, 1, 2)), "permutation"),
        "embedding_index_oob": (RuntimeError, lambda: host.embedding(ids_oob, table), r"\[9\]"),
        "embedding_rm_typecast": (RuntimeError, lambda: host.embedding(ids, table, dtype=FP32), "TILE_LAYOUT"),
        "embedding_float_ids": (RuntimeError, lambda: host.embedding(tt(torch.zeros(1, 2), FP32, RM), table),
                                "UINT32"),
        "concat_groups": (NotImplementedError, lambda: host.concat([a, a], 3, groups=2), "groups"),
        "linear_output_tile": (NotImplementedError, lambda: host.linear(a, w_ok, output_tile=[16, 32]), "output_tile"),
        "linear_in0_offset": (NotImplementedError, lambda: host.linear(a, w_ok, in0_column_offset=2),
                              "in0_column_offset"),
        "sigmoid_vector_mode": (NotImplementedError, lambda: host.sigmoid(a, vector_mode=1), "vector_mode"),
        "embedding_3d_ids": (NotImplementedError, lambda: host.embedding(ids_3d, table), "shape"),
        "copy_shapes": (RuntimeError, lambda: host.copy(a, tt(torch.zeros(1, 32))), "shapes"),
    }


@pytest.mark.parametrize("case", sorted(_invalid_calls()))
def test_invalid_calls_raise(case):
    error, call, message = _invalid_calls()[case]
    with pytest.raises(error, match=message) as info:
        call()
    if error is RuntimeError:
        assert isinstance(info.value, host.TTFatal)
