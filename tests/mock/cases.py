"""What the op-call cases share: the shapes, the inputs they build and what of their outputs is compared.

The cases are op calls as tt-metal model code makes them, written once against whichever ttnn API is passed in:
``case(ttnn, device)``, ``ttnn`` the real ttnn module (with a mock device) or :mod:`tt_models.runtime.host` (with a
host device). A valid case (``tests.mock.valid_cases.VALID``) returns its output tensor(s). An invalid case
(``tests.mock.invalid_cases.INVALID``) builds valid inputs and returns the rejected call as a zero-argument callable,
which must raise the real ``TT_FATAL`` (a ``RuntimeError``) and the host's ``TTFatal``, each naming the check its
``@rejected`` gives.
Inputs come from seeded torch tensors; shapes are model-like: head_dim 64/128, 8 Q heads over 2 KV heads
(GQA), block sizes 32/64, 4-8 users, sequences of 17/64/128 (and 1500 encoder positions).
"""

from __future__ import annotations

import torch

NH, NKV = 8, 2  # GQA: 4 Q heads per KV head
B = 8  # decode batch (users)


# --- what is compared -----------------------------------------------------------------------------------

def describe(tensor) -> dict:
    """The properties both backends must agree on, as plain (JSON-able) values."""
    if isinstance(tensor, torch.Tensor):
        return {"torch_shape": list(tensor.shape), "torch_dtype": str(tensor.dtype)}
    out = {"shape": list(tensor.shape), "padded_shape": list(tensor.padded_shape), "dtype": tensor.dtype.name,
           "layout": tensor.layout.name, "storage": tensor.storage_type().name}
    if out["storage"] == "DEVICE":
        mem = tensor.memory_config()
        out.update(memory_layout=mem.memory_layout.name, buffer_type=mem.buffer_type.name, sharded=mem.is_sharded())
        if mem.is_sharded():
            out.update(shard_shape=list(mem.shard_spec.shape), shard_cores=mem.shard_spec.grid.num_cores())
    return out


def describe_all(outputs) -> list[dict]:
    return [describe(t) for t in (outputs if isinstance(outputs, (tuple, list)) else (outputs,))]


# --- inputs ---------------------------------------------------------------------------------------

def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def tile(ttnn, device, x, dtype=None, memory_config=None):
    """A TILE tensor on the device (bf16 unless ``dtype``), DRAM unless ``memory_config``."""
    return ttnn.from_torch(x, dtype=dtype or ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device,
                           memory_config=memory_config)


def ints(ttnn, device, values, dtype=None):
    """An INT32 ROW_MAJOR index tensor (positions, page tables) in DRAM."""
    return ttnn.from_torch(torch.tensor(values, dtype=torch.int32), dtype=dtype or ttnn.int32,
                           layout=ttnn.ROW_MAJOR_LAYOUT, device=device)


def page_table(ttnn, device, users: int, blocks_per_user: int, dtype=None):
    """User ``u`` owns blocks ``u*n .. u*n+n-1`` in reverse order (any permutation would do)."""
    table = [[u * blocks_per_user + j for j in reversed(range(blocks_per_user))] for u in range(users)]
    return ints(ttnn, device, table, dtype)


def kv_cache(ttnn, device, blocks: int, block_size: int, head_dim: int, dtype=None, seed=0):
    return tile(ttnn, device, rand(blocks, NKV, block_size, head_dim, seed=seed), dtype)


def user_sharded(ttnn, device, users: int, rows: int, width: int):
    """Height-sharded in L1, one ``[rows, width]`` shard per user, users on the first cores row-wise."""
    cores = ttnn.num_cores_to_corerangeset(users, device.compute_with_storage_grid_size(), True)
    return ttnn.create_sharded_memory_config(shape=(rows, width), core_grid=cores,
                                             strategy=ttnn.ShardStrategy.HEIGHT,
                                             orientation=ttnn.ShardOrientation.ROW_MAJOR,
                                             use_height_and_width_as_shard_shape=True)


def decode_heads(ttnn, device, users: int, heads: int, head_dim: int, seed=0, dtype=None, cores=None):
    """``[1, users, heads, head_dim]`` height-sharded one user per core (the first ``users`` cores unless
    ``cores``), as ``paged_update_cache`` wants; built with ``ttnn.MemoryConfig(... ShardSpec ...)`` as
    tt-metal's cache tests do."""
    cores = cores or ttnn.num_cores_to_corerangeset(users, device.compute_with_storage_grid_size(), True)
    spec = ttnn.ShardSpec(cores, [32, head_dim], ttnn.ShardOrientation.ROW_MAJOR)
    mem = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, spec)
    return tile(ttnn, device, rand(1, users, heads, head_dim, seed=seed), dtype, memory_config=mem)


def rot_trans_mat(ttnn, device, batch_grid=None, users: int = 1):
    """tt_transformers' ``get_rot_transformation_mat``: ``T[2k, 2k+1] = 1``, ``T[2k+1, 2k] = -1``."""
    mat = torch.zeros(1, 1, 32, 32)
    mat[..., torch.arange(0, 32, 2), torch.arange(1, 32, 2)] = 1
    mat[..., torch.arange(1, 32, 2), torch.arange(0, 32, 2)] = -1
    if batch_grid is None:
        return tile(ttnn, device, mat)
    mem = ttnn.create_sharded_memory_config(shape=(32, 32), core_grid=batch_grid, strategy=ttnn.ShardStrategy.HEIGHT,
                                            orientation=ttnn.ShardOrientation.ROW_MAJOR,
                                            use_height_and_width_as_shard_shape=True)
    return tile(ttnn, device, mat.repeat(1, 1, users, 1), memory_config=mem)


def hifi(ttnn, fidelity="HiFi4"):
    return ttnn.WormholeComputeKernelConfig(math_fidelity=getattr(ttnn.MathFidelity, fidelity),
                                            math_approx_mode=False, fp32_dest_acc_en=False, packer_l1_acc=False)


def sdpa_config(ttnn, device, q_chunk=32, k_chunk=128):
    return ttnn.SDPAProgramConfig(compute_with_storage_grid_size=device.compute_with_storage_grid_size(),
                                  q_chunk_size=q_chunk, k_chunk_size=k_chunk, exp_approx_mode=False)
