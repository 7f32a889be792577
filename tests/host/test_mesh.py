"""Tensors on host meshes: per-chip values placed by the mesh mappers, ops chip by chip, and the collectives.

Meshes 1x2, 1x4, 1x8, 2x4 and 8x4 (T3K as a line, its physical 2x4, Galaxy). Sums are checked against an independent
reference: partial sums added in ring order and rounded to bfloat16 at each step (what the host backend states the
device does).
"""

import pytest
import torch

from tt_models.runtime import host as ttnn
from tt_models.runtime.host.errors import TTFatal

MESHES = [(1, 2), (1, 4), (1, 8), (2, 4), (8, 4)]


@pytest.fixture(params=MESHES, ids=lambda s: f"{s[0]}x{s[1]}")
def mesh(request):
    device = ttnn.open_mesh_device(ttnn.MeshShape(*request.param))
    yield device
    ttnn.close_mesh_device(device)


def _place(values, mesh, mapper, dtype=ttnn.bfloat16):
    return ttnn.from_torch(values, dtype=dtype, layout=ttnn.TILE_LAYOUT, device=mesh, mesh_mapper=mapper)


def _chips(t):
    return [s.to_torch().float() for s in ttnn.get_device_tensors(t)]


def test_mappers_place_each_chip_its_slice_and_composers_join_them(mesh):
    rows, cols = tuple(mesh.shape)
    n = rows * cols
    values = torch.randn(1, 1, 32 * rows, 32 * n).bfloat16().float()
    sharded = _place(values, mesh, ttnn.ShardTensorToMesh(mesh, dim=3))
    assert tuple(sharded.shape) == (1, 1, 32 * rows, 32)
    assert all(torch.equal(chip, values[..., 32 * i: 32 * (i + 1)]) for i, chip in enumerate(_chips(sharded)))
    assert torch.equal(ttnn.to_torch(sharded, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=3)).float(), values)

    grid = _place(values, mesh, ttnn.ShardTensor2dMesh(mesh, (rows, cols), dims=(2, 3)))
    for i, chip in enumerate(_chips(grid)):
        r, c = divmod(i, cols)
        assert torch.equal(chip, values[:, :, 32 * r: 32 * (r + 1), 32 * n // cols * c: 32 * n // cols * (c + 1)])
    composer = ttnn.ConcatMesh2dToTensor(mesh, (rows, cols), dims=(2, 3))
    assert torch.equal(ttnn.to_torch(grid, mesh_composer=composer).float(), values)

    replicated = _place(values, mesh, ttnn.ReplicateTensorToMesh(mesh))
    assert all(torch.equal(chip, values) for chip in _chips(replicated))
    with pytest.raises(TTFatal, match="needs a mesh_composer"):
        ttnn.to_torch(replicated)


def test_replicated_buffers_are_each_chips_own(mesh):
    """An in-place op on one chip's copy (a KV cache each chip fills with its own heads) leaves the others alone."""
    n = mesh.get_num_devices()
    cache = ttnn.from_torch(torch.zeros(2, 1, 32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh)
    per_chip = torch.arange(n, dtype=torch.float32).repeat_interleave(32).reshape(1, 1, n * 32, 1)
    per_chip = per_chip.expand(-1, -1, -1, 32)
    fill = _place(per_chip.contiguous(), mesh, ttnn.ShardTensorToMesh(mesh, dim=2))
    ttnn.fill_cache(cache, fill, batch_idx=1)
    for chip, values in enumerate(_chips(cache)):
        assert torch.equal(values[1], torch.full((1, 32, 32), float(chip)))
        assert not values[0].any()


def test_all_gather_and_mesh_partition_are_inverse(mesh):
    rows, cols = tuple(mesh.shape)
    values = torch.randn(1, 1, 32, 32 * rows * cols)
    x = _place(values, mesh, ttnn.ShardTensorToMesh(mesh, dim=3))
    axes = [None] if rows == 1 else [0, 1]
    for axis in axes:
        gathered = ttnn.all_gather(x, 3, cluster_axis=axis)
        group = cols if axis in (None, 1) else rows
        assert tuple(gathered.shape) == (1, 1, 32, 32 * group)
        chips = _chips(x)
        for i, chip in enumerate(_chips(gathered)):
            r, c = divmod(i, cols)
            members = [r * cols + k for k in range(cols)] if axis in (None, 1) else [k * cols + c for k in range(rows)]
            assert torch.equal(chip, torch.cat([chips[m] for m in members], dim=3))
        back = ttnn.mesh_partition(gathered, 3, cluster_axis=axis)
        assert all(torch.equal(a, b) for a, b in zip(_chips(back), chips))
    if rows > 1:
        with pytest.raises(TTFatal, match="requires cluster_axis"):
            ttnn.all_gather(x, 3)


def _ring_sum_bf16(values, keeper):
    n = len(values)
    order = [(keeper + 1 + i) % n for i in range(n)]
    total = values[order[0]]
    for i in order[1:]:
        total = (total + values[i]).bfloat16().float()
    return total


def test_reduce_scatter_and_all_reduce_sum_in_ring_order_at_bfloat16(mesh):
    rows, cols = tuple(mesh.shape)
    n = rows * cols
    axis = None if rows == 1 else 1
    values = torch.randn(1, 1, 32, 32 * cols * n, generator=torch.Generator().manual_seed(n))
    x = _place(values, mesh, ttnn.ShardTensorToMesh(mesh, dim=3))  # each chip [1, 1, 32, 32 * cols]: partial sums
    chips = _chips(x)
    scattered = _chips(ttnn.reduce_scatter(x, 3, cluster_axis=axis))
    reduced = _chips(ttnn.all_reduce(x, cluster_axis=axis))
    for i in range(n):
        r, k = divmod(i, cols)
        group = [chips[r * cols + m] for m in range(cols)]
        whole = _ring_sum_bf16(group, k)
        assert torch.equal(scattered[i], whole[..., 32 * k: 32 * (k + 1)])
        assert torch.equal(reduced[i], whole)
        assert torch.allclose(whole, sum(group), atol=0.25)  # and it is the sum (7 roundings at most)


def test_block_float_all_reduce_sums_in_bfloat16():
    mesh = ttnn.open_mesh_device(ttnn.MeshShape(1, 4))
    values = torch.randn(1, 1, 32, 128)
    x = _place(values, mesh, ttnn.ShardTensorToMesh(mesh, dim=3), dtype=ttnn.bfloat8_b)
    out = ttnn.all_reduce(x)
    assert out.dtype == ttnn.bfloat8_b
    total = sum(_chips(x))
    assert (_chips(out)[0] - total).abs().max() <= total.abs().max() / 2 ** 6  # bfloat8_b's 7-bit mantissa


def test_invalid_collectives_name_the_numbers():
    mesh = ttnn.open_mesh_device(ttnn.MeshShape(1, 4))
    x = _place(torch.randn(1, 1, 32, 96), mesh, ttnn.ReplicateTensorToMesh(mesh))
    with pytest.raises(TTFatal, match=r"size 96 does not split into 4 equal slices of whole 32-wide tiles"):
        ttnn.reduce_scatter(x, 3)
    with pytest.raises(TTFatal, match=r"\(66\) does not split into 4 equal shards"):
        _place(torch.randn(1, 1, 32, 66), mesh, ttnn.ShardTensorToMesh(mesh, dim=3))
    single = ttnn.from_torch(torch.randn(1, 1, 32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                             device=ttnn.open_mesh_device(ttnn.MeshShape(1, 1)))
    with pytest.raises(TTFatal, match="more than one chip"):
        ttnn.all_gather(single, 3)
    other = ttnn.open_mesh_device(ttnn.MeshShape(1, 2))
    y = _place(torch.randn(1, 1, 32, 32), other, ttnn.ReplicateTensorToMesh(other))
    with pytest.raises(TTFatal, match="meshes of 4 and 2 chips|meshes of 2 and 4 chips"):
        ttnn.add(x, y)


def test_collectives_replay_in_a_trace():
    mesh = ttnn.open_mesh_device(ttnn.MeshShape(1, 2))
    host_input = lambda v: ttnn.from_torch(v, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,  # noqa: E731
                                           mesh_mapper=ttnn.ShardTensorToMesh(mesh, dim=3))
    first, second = torch.randn(1, 1, 32, 128), torch.randn(1, 1, 32, 128)
    x = ttnn.to_device(host_input(first), mesh)
    trace = ttnn.begin_trace_capture(mesh, cq_id=0)
    out = ttnn.reduce_scatter(ttnn.all_gather(ttnn.multiply(x, 2.0), 3), 3)
    ttnn.end_trace_capture(mesh, trace, cq_id=0)
    ttnn.copy_host_to_device_tensor(host_input(second), x)
    ttnn.execute_trace(mesh, trace, cq_id=0)
    got = ttnn.to_torch(out, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=3)).float()
    # Each chip gathered the whole 2x input, and the two chips' copies were summed: 4x the new input (exact).
    assert torch.equal(got, 4 * second.bfloat16().float())


def test_device_sampling_draws_the_same_on_every_chip():
    """manual_seed(device=mesh) seeds every chip's cores: replicated logits sample the same tokens on each chip, and
    the next draw too (each chip's PRNG advances on its own)."""
    mesh = ttnn.open_mesh_device(ttnn.MeshShape(1, 4))
    logits = torch.randn(1, 1, 32, 64)
    values = _place(logits, mesh, ttnn.ReplicateTensorToMesh(mesh))
    indices = ttnn.from_torch(torch.arange(64, dtype=torch.int32).expand(1, 1, 32, 64).contiguous(),
                              dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=mesh)
    row = lambda v, dt: ttnn.from_torch(torch.full((32,), v), dtype=dt, layout=ttnn.ROW_MAJOR_LAYOUT,  # noqa: E731
                                        device=mesh)
    ttnn.manual_seed(7, device=mesh)
    draws = [_chips(ttnn.sampling(values, indices, row(32, ttnn.int32), row(1.0, ttnn.bfloat16),
                                  row(1.0, ttnn.bfloat16))) for _ in range(2)]
    for chips in draws:
        assert all(torch.equal(chips[0], c) for c in chips[1:])
    assert not torch.equal(draws[0][0], draws[1][0])
