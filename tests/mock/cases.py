"""Op calls as tt-metal model code makes them, written once against whichever ttnn API is passed in.

Each case is ``case(ttnn, device)``: ``ttnn`` is the real ttnn module (with a mock device) or
:mod:`tt_models.runtime.host` (with a host device). A valid case (``VALID``) returns its output
tensor(s). An invalid case (``INVALID``) builds valid inputs and returns the rejected call as a
zero-argument callable, which must raise the real ``TT_FATAL`` (a ``RuntimeError``) and the host's ``TTFatal``,
each naming the check its ``@rejected`` gives.
Inputs come from seeded torch tensors; shapes are model-like: head_dim 64/128, 8 Q heads over 2 KV heads
(GQA), block sizes 32/64, 4-8 users, sequences of 17/64/128 (and 1500 encoder positions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

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


# --- conversion, layout, memory -------------------------------------------------------------------

def from_to_torch(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 17, 64))
    row_major = ttnn.from_torch(rand(2, 17, 48), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    fp32 = ttnn.from_torch(rand(1, 1, 32, 64), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device)
    bfp8 = tile(ttnn, device, rand(1, 1, 17, 64), ttnn.bfloat8_b)
    host_only = ttnn.from_torch(rand(4, 40), dtype=ttnn.bfloat16)  # no device: stays on the host
    # dtype taken from the torch tensor
    inferred = ttnn.from_torch(rand(1, 1, 17, 64).bfloat16(), layout=ttnn.TILE_LAYOUT, device=device)
    ids = ttnn.from_torch(torch.arange(17).reshape(1, 17), dtype=ttnn.uint32, device=device)
    pos = ints(ttnn, device, [0, 5, -1, 7])
    return (x, row_major, fp32, bfp8, host_only, inferred, ids, pos,
            *(ttnn.to_torch(t) for t in (x, bfp8, row_major, fp32, ids, pos)))


def to_layout(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 17, 64))
    rm = ttnn.to_layout(x, ttnn.ROW_MAJOR_LAYOUT)
    bfp8 = tile(ttnn, device, rand(1, 1, 32, 64), ttnn.bfloat8_b)
    return rm, ttnn.to_layout(rm, ttnn.TILE_LAYOUT), ttnn.to_layout(bfp8, ttnn.ROW_MAJOR_LAYOUT)  # -> bf16


def typecast(ttnn, device):
    x = tile(ttnn, device, rand(1, 8, 17, 64))
    bfp8 = ttnn.typecast(x, ttnn.bfloat8_b)
    return bfp8, ttnn.typecast(bfp8, ttnn.bfloat16)


def memory_configs(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 32, 512))
    l1 = ttnn.to_memory_config(x, ttnn.L1_MEMORY_CONFIG)
    # decode activations: width-sharded over 8 cores (shard shape computed from the grid)
    width = ttnn.create_sharded_memory_config(shape=(1, 1, 32, 512), core_grid=ttnn.CoreGrid(y=1, x=8),
                                              strategy=ttnn.ShardStrategy.WIDTH,
                                              orientation=ttnn.ShardOrientation.ROW_MAJOR)
    w = ttnn.interleaved_to_sharded(x, width)
    height = user_sharded(ttnn, device, 8, 32, 64)
    h = ttnn.to_memory_config(tile(ttnn, device, rand(1, 8, 32, 64)), height)
    back = ttnn.sharded_to_interleaved(w, ttnn.L1_MEMORY_CONFIG), ttnn.to_memory_config(h, ttnn.DRAM_MEMORY_CONFIG)
    return l1, w, h, *back


# --- data movement --------------------------------------------------------------------------------

def reshape_permute(ttnn, device):
    x = tile(ttnn, device, rand(1, 17, 512))  # whisper: [B, S, H*D] -> [B, H, S, D]
    heads = ttnn.permute(ttnn.reshape(x, (1, 17, 8, 64)), (0, 2, 1, 3))
    flat = ttnn.reshape(tile(ttnn, device, rand(1, 1, 64, 256)), (1, 64, 256))
    return heads, flat, ttnn.permute(tile(ttnn, device, rand(1, 8, 32, 64)), (0, 1, 3, 2))


def concat(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 1, 17, 64)), tile(ttnn, device, rand(1, 1, 17, 64, seed=1))
    c, d = tile(ttnn, device, rand(1, 2, 32, 64)), tile(ttnn, device, rand(1, 2, 64, 64, seed=1))
    return ttnn.concat([a, b], dim=-1), ttnn.concat([c, d], dim=2)


def slice_(ttnn, device):
    x = tile(ttnn, device, rand(1, 2, 128, 64))
    cos = tile(ttnn, device, rand(1, 1, 128, 64))  # tt_transformers: one position of the cos table
    return (ttnn.slice(x, [0, 0, 0, 0], [1, 2, 64, 64]), ttnn.slice(x, [0, 1, 32, 0], [1, 2, 49, 64]),
            ttnn.slice(cos, [0, 0, 5, 0], [1, 1, 6, 64], [1, 1, 1, 1]))


def more_data_movement(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 8, 128))  # tt_transformers decode RoPE: cos [1, 1, B, D] -> [1, B, 1, D]
    y = tile(ttnn, device, rand(1, 2, 32, 64))
    host = ttnn.from_torch(rand(1, 1, 17, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    on_device = ttnn.to_device(host, device, memory_config=ttnn.L1_MEMORY_CONFIG)
    replicated = ttnn.from_torch(rand(1, 1, 32, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device,
                                 mesh_mapper=ttnn.ReplicateTensorToMesh(device))
    return (ttnn.transpose(x, 1, 2), ttnn.unsqueeze(tile(ttnn, device, rand(8, 128)), 0),
            ttnn.squeeze(y, 0), ttnn.repeat_interleave(y, 4, dim=1), ttnn.repeat(y, (1, 1, 1, 2)),
            ttnn.pad(y, ((0, 0), (0, 0), (0, 32), (0, 0)), 0.0), ttnn.clone(y, dtype=ttnn.bfloat8_b),
            on_device, ttnn.from_device(on_device), replicated,
            ttnn.zeros((1, 1, 32, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device),
            ttnn.full((1, 1, 17, 64), -1e9, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device))


def copy_host_to_device(ttnn, device):  # the generator's persistent decode inputs
    on_device = ttnn.from_torch(torch.zeros(1, 8, dtype=torch.int32), dtype=ttnn.int32, device=device)
    ttnn.copy_host_to_device_tensor(ttnn.from_torch(torch.arange(8, dtype=torch.int32).reshape(1, 8),
                                                    dtype=ttnn.int32), on_device)
    return on_device


def plus_one(ttnn, device):  # a decode step advancing its positions and rotary indices on the device
    positions, index = ints(ttnn, device, [[3, -1, 7, 0]]), ints(ttnn, device, [[3, 0, 7, 0]], ttnn.uint32)
    ttnn.plus_one(positions, skip_negative_entries=True)
    ttnn.plus_one(index)
    return positions, index


def getitem(ttnn, device):  # tt_transformers: k_fill[:, :, :page_len, :] before paged_fill_cache
    x = tile(ttnn, device, rand(1, 2, 128, 64))
    return x[:, :, :64, :]


# --- eltwise, norms, embedding ---------------------------------------------------------------------

def add_multiply(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 1, 32, 64)), tile(ttnn, device, rand(1, 1, 32, 64, seed=1))
    row = tile(ttnn, device, rand(1, 1, 1, 64, seed=2))
    scores, mask = tile(ttnn, device, rand(1, 8, 17, 32)), tile(ttnn, device, rand(1, 1, 17, 32, seed=3))
    return (ttnn.add(a, b), ttnn.multiply(a, b), ttnn.multiply(a, row), ttnn.add(scores, mask),
            ttnn.multiply(a, 0.125), ttnn.add(a, b, dtype=ttnn.bfloat8_b))


def more_eltwise(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 1, 17, 64)), tile(ttnn, device, rand(1, 1, 17, 64, seed=1))
    positive = ttnn.exp(a)
    scores = tile(ttnn, device, rand(1, 8, 32, 64, seed=2))
    return (ttnn.subtract(a, b), ttnn.sub(a, b), ttnn.mul(a, b), ttnn.divide(a, positive), ttnn.div(a, 2.0),
            ttnn.neg(a), ttnn.reciprocal(positive), ttnn.relu(a), ttnn.rsqrt(positive), ttnn.sqrt(positive),
            ttnn.sigmoid(a), ttnn.tanh(a), ttnn.eq(a, b), ttnn.where(ttnn.eq(a, b), a, b),
            ttnn.softmax_in_place(scores))


def activations(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 17, 256))
    return ttnn.gelu(x), ttnn.silu(x), ttnn.softmax(tile(ttnn, device, rand(1, 8, 17, 40)), dim=-1)


def rms_norm(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 17, 256))
    # tt_transformers' RMSNorm weight: ROW_MAJOR [1, 1, dim/32, 32]
    w = ttnn.from_torch(rand(1, 1, 8, 32, seed=1), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    return (ttnn.rms_norm(x, epsilon=1e-5, weight=w, compute_kernel_config=hifi(ttnn, "HiFi2")),
            ttnn.rms_norm(x, epsilon=1e-5, weight=w, residual_input_tensor=tile(ttnn, device, rand(1, 1, 17, 256))))


def layer_norm(ttnn, device):
    x = tile(ttnn, device, rand(1, 17, 256))
    w, b = tile(ttnn, device, rand(1, 256, seed=1)), tile(ttnn, device, rand(1, 256, seed=2))
    return ttnn.layer_norm(x, weight=w, bias=b, epsilon=1e-5), ttnn.layer_norm(x)


def embedding(ttnn, device):
    ids = ttnn.from_torch(torch.randint(0, 100, (1, 17), generator=torch.Generator().manual_seed(0)),
                          dtype=ttnn.uint32, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    table = ttnn.from_torch(rand(100, 256), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    return ttnn.embedding(ids, table), ttnn.embedding(ids, table, layout=ttnn.TILE_LAYOUT, dtype=ttnn.bfloat16)


# --- matmul -----------------------------------------------------------------------------------------

def linear(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 17, 256))
    w = tile(ttnn, device, rand(256, 512, seed=1), ttnn.bfloat8_b)
    bias = tile(ttnn, device, rand(1, 512, seed=2))
    w_t = tile(ttnn, device, rand(512, 256, seed=3))  # [N, K] as torch stores it
    return (ttnn.linear(x, w, bias=bias), ttnn.linear(tile(ttnn, device, rand(1, 17, 256)), w),
            ttnn.linear(x, w, activation="gelu", dtype=ttnn.bfloat8_b, compute_kernel_config=hifi(ttnn, "HiFi2")),
            ttnn.linear(x, w_t, transpose_b=True, memory_config=ttnn.L1_MEMORY_CONFIG),
            ttnn.linear(x, w, activation="silu", dtype=ttnn.bfloat16))


def matmul(ttnn, device):
    q, kt = tile(ttnn, device, rand(1, 8, 17, 64)), tile(ttnn, device, rand(1, 8, 64, 40, seed=1))
    probs, v = tile(ttnn, device, rand(1, 8, 17, 40, seed=2)), tile(ttnn, device, rand(1, 8, 40, 64, seed=3))
    return ttnn.matmul(q, kt), ttnn.matmul(probs, v, dtype=ttnn.bfloat8_b)


# --- attention heads and rotary embedding ------------------------------------------------------------

def create_qkv_heads(ttnn, device):
    fused = tile(ttnn, device, rand(1, 1, 128, (NH + 2 * NKV) * 64))
    q, k, v = ttnn.experimental.nlp_create_qkv_heads(fused, num_heads=NH, num_kv_heads=NKV,
                                                     transpose_k_heads=False,
                                                     memory_config=ttnn.DRAM_MEMORY_CONFIG)
    kt = ttnn.experimental.nlp_create_qkv_heads(fused, num_heads=NH, num_kv_heads=NKV)[1]  # K transposed
    return q, k, v, kt


def create_qkv_heads_decode(ttnn, device):
    """tt_transformers decode: the fused QKV comes out of a width-sharded linear, goes to L1 interleaved
    bf16, is cut to the unpadded batch (tt_transformers uses the ``(logical, padded)`` reshape overload, which
    the host backend does not offer; a slice gives the same ``(1, 1, B, w)`` over ``(1, 1, 32, w)``), then
    split into Q/K/V height-sharded one user per core (``CREATE_QKV_DECODE_SHARD``)."""
    d = 128
    width = (NH + 2 * NKV) * d
    mem = ttnn.create_sharded_memory_config(shape=(32, width // 8), core_grid=ttnn.CoreGrid(y=1, x=8),
                                            strategy=ttnn.ShardStrategy.WIDTH,
                                            orientation=ttnn.ShardOrientation.ROW_MAJOR,
                                            use_height_and_width_as_shard_shape=True)
    fused = tile(ttnn, device, rand(1, 1, 32, width), ttnn.bfloat8_b, memory_config=mem)
    fused = ttnn.sharded_to_interleaved(fused, ttnn.L1_MEMORY_CONFIG, ttnn.bfloat16)
    fused = ttnn.slice(fused, (0, 0, 0, 0), (1, 1, B, width))
    heads_mem = ttnn.create_sharded_memory_config(shape=(32, d), core_grid=ttnn.CoreGrid(y=4, x=8),
                                                  strategy=ttnn.ShardStrategy.HEIGHT,
                                                  orientation=ttnn.ShardOrientation.ROW_MAJOR,
                                                  use_height_and_width_as_shard_shape=True)
    sharded = ttnn.experimental.nlp_create_qkv_heads_decode(fused, num_heads=NH, num_kv_heads=NKV,
                                                            memory_config=heads_mem)
    # a DRAM input [1, 1, B, w] with the generic height-sharded config (other TT model code)
    plain = ttnn.experimental.nlp_create_qkv_heads_decode(tile(ttnn, device, rand(1, 1, B, width)), num_heads=NH,
                                                          num_kv_heads=NKV,
                                                          memory_config=ttnn.L1_HEIGHT_SHARDED_MEMORY_CONFIG)
    return fused, *sharded, *plain


def concat_heads(ttnn, device):
    return ttnn.experimental.nlp_concat_heads(tile(ttnn, device, rand(1, NH, 128, 64)),
                                              memory_config=ttnn.DRAM_MEMORY_CONFIG)


def concat_heads_decode(ttnn, device):
    """tt_transformers: the SDPA decode output (DRAM) moved to one ``[32, D]`` shard per user, then concat."""
    attn = tile(ttnn, device, rand(1, B, NH, 128))
    grid = ttnn.num_cores_to_corerangeset(B, device.compute_with_storage_grid_size(), True)
    mem = ttnn.create_sharded_memory_config(shape=(32, 128), core_grid=grid, strategy=ttnn.ShardStrategy.HEIGHT,
                                            orientation=ttnn.ShardOrientation.ROW_MAJOR,
                                            use_height_and_width_as_shard_shape=True)
    sharded = ttnn.to_memory_config(attn, mem)
    return sharded, ttnn.experimental.nlp_concat_heads_decode(sharded, num_heads=NH)


def rotary_prefill(ttnn, device):
    x = tile(ttnn, device, rand(1, NH, 128, 64))
    cos, sin = tile(ttnn, device, rand(1, 1, 128, 64, seed=1)), tile(ttnn, device, rand(1, 1, 128, 64, seed=2))
    return ttnn.experimental.rotary_embedding_llama(x, cos, sin, rot_trans_mat(ttnn, device), is_decode_mode=False,
                                                    compute_kernel_config=hifi(ttnn, "HiFi2"))


def rotary_decode(ttnn, device):
    """tt_transformers decode RoPE: Q heads, per-user cos/sin and the transformation matrix all
    height-sharded on the batch grid (one user per core)."""
    d = 128
    grid = ttnn.num_cores_to_corerangeset(B, device.compute_with_storage_grid_size(), True)
    cos_mem = user_sharded(ttnn, device, B, 32, d)
    cos = ttnn.interleaved_to_sharded(tile(ttnn, device, rand(1, B, 1, d, seed=1)), cos_mem)
    sin = ttnn.interleaved_to_sharded(tile(ttnn, device, rand(1, B, 1, d, seed=2)), cos_mem)
    q = decode_heads(ttnn, device, B, NH, d)
    k = decode_heads(ttnn, device, B, NKV, d, seed=3)
    trans = rot_trans_mat(ttnn, device, grid, B)
    return tuple(ttnn.experimental.rotary_embedding_llama(x, cos, sin, trans, is_decode_mode=True) for x in (q, k))


# --- KV caches ----------------------------------------------------------------------------------------

def paged_fill_cache(ttnn, device):
    """Prefill of user 2 into bf16 and bfp8 caches (K typecast first, as tt_transformers does): 17 and 128
    tokens, and 1500 encoder positions into cross-attention blocks."""
    outs = []
    for dtype, bs, d, seq in ((ttnn.bfloat16, 32, 64, 17), (ttnn.bfloat8_b, 64, 128, 128),
                              (ttnn.bfloat8_b, 32, 64, 1500)):
        blocks = math.ceil(seq / bs) + 1
        cache = kv_cache(ttnn, device, 4 * blocks, bs, d, dtype)
        k = tile(ttnn, device, rand(1, NKV, seq, d, seed=1))
        if dtype != ttnn.bfloat16:
            k = ttnn.typecast(k, dtype)
        table = page_table(ttnn, device, 4, blocks)
        outs.append(ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=2))
    # batched prefill: two sequences into page-table rows 1 and 3
    cache, k = kv_cache(ttnn, device, 16, 32, 64), tile(ttnn, device, rand(2, NKV, 64, 64))
    outs.append(ttnn.experimental.paged_fill_cache(cache, k, page_table(ttnn, device, 4, 2),
                                                   batch_idx_tensor=ints(ttnn, device, [1, 3])))
    return tuple(outs)


def paged_update_cache(ttnn, device):
    """Decode cache write: K ``[1, B, NKV, D]`` one user per core, user 3 skipped (-1)."""
    outs = []
    for dtype, bs, d in ((ttnn.bfloat8_b, 64, 128), (ttnn.bfloat16, 32, 64)):
        cache = kv_cache(ttnn, device, B * 4, bs, d, dtype)
        pos = ints(ttnn, device, [0, 5, 63, -1, 100, 7, 31, 32])
        k = decode_heads(ttnn, device, B, NKV, d)
        outs.append(ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos,
                                                         page_table=page_table(ttnn, device, B, 4)))
    return tuple(outs)


def paged_update_cache_unpaged(ttnn, device):
    """Whisper decoder: non-paged ``[B, NKV, S_max, D]`` bfp8 cache, positions from a tensor."""
    cache = tile(ttnn, device, rand(B, NKV, 256, 64), ttnn.bfloat8_b)
    pos = ints(ttnn, device, [0, 1, 2, 100, 255, 31, 32, 33])
    return ttnn.experimental.paged_update_cache(cache, decode_heads(ttnn, device, B, NKV, 64), update_idxs_tensor=pos)


def paged_fused_update_cache(ttnn, device):
    """K and V written together: their shards on disjoint core ranges (users on rows 0 and 1 of the grid)."""
    keys, values = (kv_cache(ttnn, device, B * 4, 32, 64, ttnn.bfloat8_b, seed=s) for s in (1, 2))
    k, v = (decode_heads(ttnn, device, B, NKV, 64, seed=y, cores=ttnn.CoreRangeSet(
        {ttnn.CoreRange(ttnn.CoreCoord(0, y), ttnn.CoreCoord(B - 1, y))})) for y in (0, 1))
    pos = ints(ttnn, device, [0, 9, -1, 3, 4, 5, 6, 127])
    return ttnn.experimental.paged_fused_update_cache(keys, k, values, v, update_idxs_tensor=pos,
                                                      page_table=page_table(ttnn, device, B, 4))


def fill_update_cache(ttnn, device):
    """Non-paged caches ``[B, NKV, S_max, D]`` (whisper-style)."""
    cache = kv_cache(ttnn, device, 4, 128, 64)
    filled = ttnn.fill_cache(cache, tile(ttnn, device, rand(1, NKV, 64, 64, seed=1)), 1)
    step = tile(ttnn, device, rand(1, NKV, 4, 64, seed=2))  # [1, H, users, D]
    return filled, ttnn.update_cache(cache, step, 70)


# --- attention ------------------------------------------------------------------------------------------

def sdpa_causal(ttnn, device):
    q = tile(ttnn, device, rand(1, NH, 128, 64), ttnn.bfloat8_b)
    k, v = (tile(ttnn, device, rand(1, NKV, 128, 64, seed=s), ttnn.bfloat8_b) for s in (1, 2))
    return (ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125,
                                                          compute_kernel_config=hifi(ttnn, "HiFi2"),
                                                          program_config=sdpa_config(ttnn, device, 64, 64)),
            ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True, sliding_window_size=64))


def sdpa_masked(ttnn, device):
    """Non-causal with an additive mask, broadcast over heads (and over the batch, or one per sequence)."""
    q = tile(ttnn, device, rand(2, NH, 64, 64))
    k, v = (tile(ttnn, device, rand(2, NH, 128, 64, seed=s)) for s in (1, 2))
    return tuple(ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=mask,
                                                               program_config=sdpa_config(ttnn, device, 32, 128))
                 for mask in (tile(ttnn, device, torch.zeros(b, 1, 64, 128)) for b in (1, 2)))


def sdpa_cross(ttnn, device):
    """Encoder or cross attention over 1500 encoder positions (Sk not a multiple of 32), no mask."""
    q = tile(ttnn, device, rand(1, 6, 17, 64))
    k, v = (tile(ttnn, device, rand(1, 6, 1500, 64, seed=s)) for s in (1, 2))
    return ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False)


def sdpa_chunked(ttnn, device):
    """Second 64-token chunk of a 128-token prompt reading the paged cache (bs 32, 4 blocks)."""
    keys, values = (kv_cache(ttnn, device, 8, 32, 64, ttnn.bfloat8_b, seed=s) for s in (1, 2))
    q = tile(ttnn, device, rand(1, NH, 64, 64), ttnn.bfloat8_b)
    return ttnn.transformer.chunked_scaled_dot_product_attention(
        q, keys, values, page_table(ttnn, device, 1, 4), 64,
        program_config=sdpa_config(ttnn, device, 64, 64), compute_kernel_config=hifi(ttnn, "HiFi2"))


def paged_sdpa_decode_causal(ttnn, device):
    """tt_transformers decode: Q sharded one user per core (after RoPE), output to DRAM, user 3 inactive."""
    d, bs = 128, 64
    keys, values = (kv_cache(ttnn, device, B * 4, bs, d, ttnn.bfloat8_b, seed=s) for s in (1, 2))
    pos = ints(ttnn, device, [0, 5, 63, -1, 100, 7, 31, 255])
    table = page_table(ttnn, device, B, 4)
    sharded_q = ttnn.transformer.paged_scaled_dot_product_attention_decode(
        decode_heads(ttnn, device, B, NH, d), keys, values, cur_pos_tensor=pos, page_table_tensor=table,
        scale=d ** -0.5, compute_kernel_config=hifi(ttnn, "HiFi2"), memory_config=ttnn.DRAM_MEMORY_CONFIG,
        program_config=ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), exp_approx_mode=False,
                                              q_chunk_size=256, k_chunk_size=256))
    dram_q = ttnn.transformer.paged_scaled_dot_product_attention_decode(
        tile(ttnn, device, rand(1, B, NH, d)), keys, values, page_table_tensor=table, cur_pos_tensor=pos)
    return sharded_q, dram_q


def paged_sdpa_decode_cross(ttnn, device):
    """Mllama-style cross attention: non-causal, additive mask over the cross blocks, k_chunk 128."""
    d, bs, blocks = 64, 32, 4
    keys, values = (kv_cache(ttnn, device, B * blocks, bs, d, seed=s) for s in (1, 2))
    q = tile(ttnn, device, rand(1, B, NH, d))
    mask = tile(ttnn, device, torch.zeros(1, B, NH, blocks * bs))
    return ttnn.transformer.paged_scaled_dot_product_attention_decode(
        q, keys, values, is_causal=False, attn_mask=mask, page_table_tensor=page_table(ttnn, device, B, blocks),
        scale=d ** -0.5, program_config=sdpa_config(ttnn, device, 32, 128))


def sdpa_decode(ttnn, device):
    """Whisper decoder self attention: non-paged ``[B, NKV, S, D]`` cache, k_chunk 256."""
    keys, values = (tile(ttnn, device, rand(4, NKV, 512, 64, seed=s), ttnn.bfloat8_b) for s in (1, 2))
    q = tile(ttnn, device, rand(1, 4, NH, 64))
    return (ttnn.transformer.scaled_dot_product_attention_decode(
                q, keys, values, cur_pos_tensor=ints(ttnn, device, [0, 17, 300, 511]),
                program_config=sdpa_config(ttnn, device, 32, 256), compute_kernel_config=hifi(ttnn, "HiFi2")),
            ttnn.transformer.scaled_dot_product_attention_decode(q, keys, values, cur_pos=[0, 1, 2, 3]))


def token_selection(ttnn, device):
    """tt_models.tt.sampling.TTSampling's calls: argmax, topk + sampling with per-core seeds, log-probs, penalties."""
    logits = tile(ttnn, device, rand(1, 1, 32, 1024), ttnn.float32)
    greedy = ttnn.argmax(logits, dim=3, keepdim=True)
    values, indices = ttnn.topk(logits, k=32, dim=-1)
    values = ttnn.typecast(values, ttnn.bfloat16)
    indices = ttnn.to_layout(indices, ttnn.ROW_MAJOR_LAYOUT)
    users = ints(ttnn, device, list(range(32)), ttnn.uint32)
    ttnn.manual_seed(ints(ttnn, device, [7 * u for u in range(32)], ttnn.uint32), user_ids=users)
    row = lambda v: ttnn.from_torch(torch.full((32,), v), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT,
                                    device=device)
    tokens = ttnn.sampling(values, indices, ints(ttnn, device, [5] * 32, ttnn.uint32), row(0.9), row(1.0))
    tokens = ttnn.reshape(tokens, (1, 1, 32, 1))
    index = ttnn.to_layout(tokens, ttnn.TILE_LAYOUT)
    log_probs = ttnn.log(ttnn.gather(ttnn.softmax(logits, dim=-1), 3, index))
    column = tile(ttnn, device, torch.full((1, 1, 32, 1), 1.3), ttnn.float32)
    seen = tile(ttnn, device, (rand(1, 1, 32, 1024) > 1).float(), ttnn.float32)
    factor = ttnn.where(ttnn.gt(logits, 0.0), column, column)
    penalised = ttnn.multiply(logits, ttnn.where(seen, factor, 1.0))
    return greedy, values, indices, tokens, log_probs, penalised


VALID = [from_to_torch, to_layout, typecast, memory_configs, reshape_permute, concat, slice_, more_data_movement,
         copy_host_to_device, plus_one, getitem, add_multiply, more_eltwise, activations, rms_norm, layer_norm,
         embedding, linear, matmul, create_qkv_heads, create_qkv_heads_decode, concat_heads, concat_heads_decode,
         rotary_prefill, rotary_decode, paged_fill_cache, paged_update_cache, paged_update_cache_unpaged,
         paged_fused_update_cache, fill_update_cache, sdpa_causal, sdpa_masked, sdpa_cross, sdpa_chunked,
         paged_sdpa_decode_causal, paged_sdpa_decode_cross, sdpa_decode, token_selection]


# --- invalid calls ------------------------------------------------------------------------------------------
# Each builds valid inputs and returns the rejected call. ``@rejected`` says which check must reject it, on each
# backend: side by side, the host message and the real condition name the same violated condition.

@dataclass(frozen=True)
class Rejection:
    """The check that rejects an invalid call.

    ``op`` and ``host``: the host raises ``TTFatal(f"{op}: <message>")`` with ``host`` (a regex) matching the
    message from its start. ``real``: literal text of the real ``TT_FATAL``, before its backtrace: the C++
    condition that failed (for a ``TT_THROW``, whose condition says nothing, its message).
    """

    op: str
    host: str
    real: str


def rejected(op: str, host: str, real: str) -> Callable[[Callable], Callable]:
    def mark(case: Callable) -> Callable:
        case.rejection = Rejection(op, host, real)
        return case
    return mark


PAGED_DECODE = "paged_scaled_dot_product_attention_decode"


def _fill_args(ttnn, device, cache_dtype=None, input_dtype=None, seq=64, users=4, blocks=2):
    cache = kv_cache(ttnn, device, 16, 32, 64, cache_dtype or ttnn.bfloat16)
    k = tile(ttnn, device, rand(1, NKV, seq, 64), input_dtype or cache_dtype)
    return cache, k, page_table(ttnn, device, users, blocks)


def _update_args(ttnn, device):
    return (kv_cache(ttnn, device, B * 4, 32, 64), decode_heads(ttnn, device, B, NKV, 64),
            ints(ttnn, device, list(range(B))), page_table(ttnn, device, B, 4))


def _decode_args(ttnn, device):
    keys, values = (kv_cache(ttnn, device, B * 4, 32, 64, seed=s) for s in (1, 2))
    return tile(ttnn, device, rand(1, B, NH, 64)), keys, values, page_table(ttnn, device, B, 4)


def _decode_call(ttnn, q, keys, values, table, **kwargs):
    return lambda: ttnn.transformer.paged_scaled_dot_product_attention_decode(q, keys, values,
                                                                              page_table_tensor=table, **kwargs)


@rejected("paged_fill_cache", r"Input tensor dtype \(BFLOAT16\) must match cache tensor dtype \(BFLOAT8_B\)",
          "input_tensor.dtype() == cache_tensor.dtype()")
def fill_cache_dtype_mismatch(ttnn, device):  # bf16 K into a bfp8 cache without the typecast
    cache, k, table = _fill_args(ttnn, device, ttnn.bfloat8_b, ttnn.bfloat16)
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=0)


@rejected("paged_fill_cache", r"Input seq_len \(96\) must fit in max_num_blocks_per_seq \(2\) \* block_size \(32\)",
          "input_shape[2] <= effective_block_size * page_table_shape[1]")
def fill_cache_seq_too_long(ttnn, device):  # 96 tokens, 2 blocks of 32
    cache, k, table = _fill_args(ttnn, device, seq=96)
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=0)


@rejected("paged_fill_cache", r"Batch idx must be within the page_table batch size",
          "args.batch_idx_fallback < page_table_shape[0]")
def fill_cache_batch_idx_out_of_range(ttnn, device):  # the page table has 4 rows
    cache, k, table = _fill_args(ttnn, device)
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=4)


@rejected("paged_fill_cache",
          r"paged_fill_cache geometry mismatch: cache has 4096 elems/block .* view is 8192 .*head_dim=128",
          "view_elems_per_block == cache_elems_per_block")
def fill_cache_head_dim_mismatch(ttnn, device):
    cache, _, table = _fill_args(ttnn, device)
    k = tile(ttnn, device, rand(1, NKV, 64, 128))
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=0)


@rejected("paged_fill_cache", r"input batch 2 > 1 needs batch_idx_tensor", "input_batch == 1")
def fill_cache_batch_without_idx_tensor(ttnn, device):  # 2 sequences need batch_idx_tensor
    cache, _, table = _fill_args(ttnn, device)
    k = tile(ttnn, device, rand(2, NKV, 64, 64))
    return lambda: ttnn.experimental.paged_fill_cache(cache, k, table, batch_idx=1)


@rejected("paged_update_cache", r"Expect input_tensor to be sharded", "input_tensor.is_sharded()")
def update_cache_unsharded_input(ttnn, device):
    cache, _, pos, table = _update_args(ttnn, device)
    k = tile(ttnn, device, rand(1, B, NKV, 64))
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Number of update_idxs \(9\) should match batch size \(8\)",
          "input_tensor.padded_shape()[1] == num_indices")
def update_cache_idxs_count(ttnn, device):  # 9 positions for 8 users
    cache, k, _, table = _update_args(ttnn, device)
    pos = ints(ttnn, device, list(range(9)))
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Expect page table to have datatype INT32, got UINT32",
          "page_table_val.dtype() == DataType::INT32")
def update_cache_page_table_not_int32(ttnn, device):
    cache, k, pos, _ = _update_args(ttnn, device)
    table = page_table(ttnn, device, B, 4, ttnn.uint32)
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Expected update_idxs to have datatype INT32",
          "update_idxs_tensor_val.dtype() == DataType::INT32")
def update_cache_idxs_not_int32(ttnn, device):
    cache, k, _, table = _update_args(ttnn, device)
    pos = ints(ttnn, device, list(range(B)), ttnn.uint32)
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_update_cache", r"Data type of input tensor for update cache must be FLOAT32 or BFLOAT16",
          "input_tensor.dtype() == DataType::FLOAT32 || input_tensor.dtype() == DataType::BFLOAT16")
def update_cache_bfp8_input(ttnn, device):  # the input must stay bf16/fp32, the op packs it
    cache, _, pos, table = _update_args(ttnn, device)
    k = decode_heads(ttnn, device, B, NKV, 64, dtype=ttnn.bfloat8_b)
    return lambda: ttnn.experimental.paged_update_cache(cache, k, update_idxs_tensor=pos, page_table=table)


@rejected("paged_fused_update_cache", r"input_tensor1 and input_tensor2 must not have overlapping shard grids",
          "!is_overlap")
def fused_update_overlapping_inputs(ttnn, device):  # K and V shards on the same cores
    keys, k, pos, table = _update_args(ttnn, device)
    values = kv_cache(ttnn, device, B * 4, 32, 64)
    return lambda: ttnn.experimental.paged_fused_update_cache(keys, k, values, k, update_idxs_tensor=pos,
                                                              page_table=table)


@rejected(PAGED_DECODE, r"Must have cur_pos tensor for paged attention in causal mode",
          "tensor_args.cur_pos_tensor.has_value()")
def decode_causal_without_cur_pos(ttnn, device):  # paged causal decode reads positions from a tensor
    return _decode_call(ttnn, *_decode_args(ttnn, device))


@rejected(PAGED_DECODE, r"cur_pos must have batch size equal to Q, got 9 and 8", "cur_pos_shape[-1] == B")
def decode_cur_pos_batch(ttnn, device):  # 9 positions for a Q batch of 8
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, list(range(9))))


@rejected(PAGED_DECODE, r"cur_pos must have batch size equal to Q, got 8 and 4", "cur_pos_shape[-1] == B")
def decode_page_table_batch(ttnn, device):
    """Page table rows for 4 users, Q and cur_pos for 8. The real op takes its batch B from the page table and
    rejects cur_pos (it never compares Q with the page table: with cur_pos for 4 users it accepts this Q)."""
    q, keys, values, _ = _decode_args(ttnn, device)
    table, pos = page_table(ttnn, device, 4, 4), ints(ttnn, device, [0] * B)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=pos)


@rejected(PAGED_DECODE, r"Must not have attn_mask tensor for causal attention", "not tensor_args.attn_mask.has_value()")
def decode_mask_with_causal(ttnn, device):
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B),
                        attn_mask=tile(ttnn, device, torch.zeros(1, B, NH, 128)))


@rejected(PAGED_DECODE, r"Mask sequence length must be multiple of chunk size, got: 128 and 256",
          "mask_shape[3] % operation_attributes.k_chunk_size == 0")
def decode_non_causal_k_chunk(ttnn, device):  # k_chunk 256 does not divide the 4 x 32 paged length
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, is_causal=False,
                        attn_mask=tile(ttnn, device, torch.zeros(1, B, NH, 128)),
                        program_config=sdpa_config(ttnn, device, 32, 256))


@rejected(PAGED_DECODE, r"Sharded output not supported for GQA", "!operation_attributes.output_mem_config.is_sharded()")
def decode_gqa_sharded_output(ttnn, device):
    q, keys, values, table = _decode_args(ttnn, device)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B),
                        memory_config=user_sharded(ttnn, device, B, 32, 64))


@rejected(PAGED_DECODE, r"Unsupported data type FLOAT32\.",
          "input_tensor.dtype() == DataType::BFLOAT16 || input_tensor.dtype() == DataType::BFLOAT8_B")
def decode_fp32_q(ttnn, device):
    _, keys, values, table = _decode_args(ttnn, device)
    q = tile(ttnn, device, rand(1, B, NH, 64), ttnn.float32)
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B))


@rejected(PAGED_DECODE, r"Unsupported data type FLOAT32\.",
          "input_tensor.dtype() == DataType::BFLOAT16 || input_tensor.dtype() == DataType::BFLOAT8_B")
def decode_fp32_cache(ttnn, device):  # a float32 KV cache cannot be read by SDPA decode (bf16 / bfp8 / bfp4)
    q, _, _, table = _decode_args(ttnn, device)
    keys, values = (kv_cache(ttnn, device, B * 4, 32, 64, ttnn.float32, seed=s) for s in (1, 2))
    return _decode_call(ttnn, q, keys, values, table, cur_pos_tensor=ints(ttnn, device, [0] * B))


@rejected("scaled_dot_product_attention_decode", r"K sequence length must be multiple of chunk size, got: 384 and 256",
          "k_shape[2] % operation_attributes.k_chunk_size == 0")
def unpaged_decode_k_chunk(ttnn, device):  # k_chunk 256 does not divide S = 384
    keys, values = (tile(ttnn, device, rand(4, NKV, 384, 64, seed=s)) for s in (1, 2))
    q, pos = tile(ttnn, device, rand(1, 4, NH, 64)), ints(ttnn, device, [0, 1, 2, 3])
    return lambda: ttnn.transformer.scaled_dot_product_attention_decode(
        q, keys, values, cur_pos_tensor=pos, program_config=sdpa_config(ttnn, device, 32, 256))


@rejected("linear", r"inner dims differ: input_tensor_a \[1, 1, 32, 64\] has K=64, input_tensor_b \[96, 128\] has K=96",
          "a_shape[-1] == b_shape[-2]")
def linear_inner_dims(ttnn, device):
    x, w = tile(ttnn, device, rand(1, 1, 32, 64)), tile(ttnn, device, rand(96, 128))
    return lambda: ttnn.linear(x, w)


@rejected("matmul",
          r"inner dims differ: input_tensor_a \[1, 8, 32, 64\] has K=64, input_tensor_b \[1, 8, 32, 64\] has K=32",
          "a_shape[-1] == b_shape[-2]")
def matmul_inner_dims(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 8, 32, 64)), tile(ttnn, device, rand(1, 8, 32, 64))
    return lambda: ttnn.matmul(a, b)


@rejected("scaled_dot_product_attention",
          r"Causal SDPA requires Q and K to have the same sequence length, got 64 and 128",
          "Sq == Sk")
def sdpa_causal_sq_ne_sk(ttnn, device):
    q = tile(ttnn, device, rand(1, NH, 64, 64))
    k, v = (tile(ttnn, device, rand(1, NKV, 128, 64, seed=s)) for s in (1, 2))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True)


@rejected("scaled_dot_product_attention", r"Unsupported data type FLOAT32",
          "input_tensor->dtype() == DataType::BFLOAT16 || input_tensor->dtype() == DataType::BFLOAT8_B")
def sdpa_fp32_operands(ttnn, device):  # no float32 attention on TT-NN, prefill included
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s), ttnn.float32) for s in range(3))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False)


@rejected("scaled_dot_product_attention", r"attn_mask must be None when is_causal is True",
          "!(attrs.is_causal && tensors.attn_mask.has_value())")
def sdpa_mask_with_causal(ttnn, device):
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s)) for s in range(3))
    mask = tile(ttnn, device, torch.zeros(1, 1, 64, 64))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True, attn_mask=mask)


@rejected("scaled_dot_product_attention", r"attn_mask cannot be combined with sliding_window_size",
          "!(attrs.sliding_window_size.value_or(0) > 0 && tensors.attn_mask.has_value())")
def sdpa_mask_with_window(ttnn, device):
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s)) for s in range(3))
    mask = tile(ttnn, device, torch.zeros(1, 1, 64, 64))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=mask,
                                                                 sliding_window_size=32)


@rejected("scaled_dot_product_attention", r"Mask num_heads must either be 1 .* or must match Q heads dimension",
          "mask_shape[1] == 1 || mask_shape[1] == q_shape[1]")
def sdpa_mask_heads(ttnn, device):  # a mask has 1 or NQH heads
    q, k, v = (tile(ttnn, device, rand(1, NH, 64, 64, seed=s)) for s in range(3))
    mask = tile(ttnn, device, torch.zeros(1, 2, 64, 64))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=mask)


@rejected("scaled_dot_product_attention", r"GQA expects Q to have a multiple of K heads, but got 8 and 3",
          "nkv > 0 && nqh >= nkv && nqh % nkv == 0")
def sdpa_heads_not_divisible(ttnn, device):  # 8 Q heads over 3 KV heads
    q = tile(ttnn, device, rand(1, NH, 64, 64))
    k, v = (tile(ttnn, device, rand(1, 3, 64, 64, seed=s)) for s in (1, 2))
    return lambda: ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=True)


@rejected("chunked_scaled_dot_product_attention",
          r"kv_len 128 \(page table blocks \* block_size\) must be >= chunk_start_idx \+ Sq \(160\)",
          "kv_length >= q_shape[2] + attrs.chunk_start_idx.value()")
def chunked_sdpa_past_page_table(ttnn, device):  # chunk [96, 160) but the table covers 128 tokens
    keys, values = (kv_cache(ttnn, device, 8, 32, 64, seed=s) for s in (1, 2))
    q, table = tile(ttnn, device, rand(1, NH, 64, 64)), page_table(ttnn, device, 1, 4)
    return lambda: ttnn.transformer.chunked_scaled_dot_product_attention(q, keys, values, table, 96)


@rejected("chunked_scaled_dot_product_attention", r"chunk_start_idx \(32\) must be a multiple of q_chunk_size \(64\)",
          "attrs.chunk_start_idx.value() % q_chunk_size == 0")
def chunked_sdpa_start_not_chunk_multiple(ttnn, device):  # start 32 with 64-token q/k chunks
    keys, values = (kv_cache(ttnn, device, 8, 32, 64, seed=s) for s in (1, 2))
    q, table = tile(ttnn, device, rand(1, NH, 64, 64)), page_table(ttnn, device, 1, 4)
    return lambda: ttnn.transformer.chunked_scaled_dot_product_attention(
        q, keys, values, table, 32, program_config=sdpa_config(ttnn, device, 64, 64))


@rejected("rotary_embedding_llama", r"input must be BFLOAT16, got BFLOAT8_B",
          "input_tensor.dtype() == cos.dtype() && cos.dtype() == sin.dtype()")
def rotary_bfp8_input(ttnn, device):
    x = tile(ttnn, device, rand(1, NH, 128, 64), ttnn.bfloat8_b)
    cos, sin = tile(ttnn, device, rand(1, 1, 128, 64, seed=1)), tile(ttnn, device, rand(1, 1, 128, 64, seed=2))
    trans = rot_trans_mat(ttnn, device)
    return lambda: ttnn.experimental.rotary_embedding_llama(x, cos, sin, trans, is_decode_mode=False)


@rejected("rotary_embedding_llama", r"decode mode needs a height-sharded input",
          "input_tensor.memory_config().memory_layout() == TensorMemoryLayout::HEIGHT_SHARDED")
def rotary_decode_interleaved(ttnn, device):  # decode mode needs height-sharded inputs
    x = tile(ttnn, device, rand(1, B, NH, 64))
    cos, sin = tile(ttnn, device, rand(1, B, 1, 64, seed=1)), tile(ttnn, device, rand(1, B, 1, 64, seed=2))
    trans = rot_trans_mat(ttnn, device)
    return lambda: ttnn.experimental.rotary_embedding_llama(x, cos, sin, trans, is_decode_mode=True)


@rejected("nlp_create_qkv_heads", r"input width 700 is not \(num_heads \+ 2 \* num_kv_heads\) \* head_dim",
          "input_tensor_q.padded_shape()[3] % (num_q_heads + 2 * num_kv_heads_val) == 0")
def create_qkv_heads_bad_width(ttnn, device):  # 8 + 2*2 heads of 64 need width 768
    fused = tile(ttnn, device, rand(1, 1, 128, 700))
    return lambda: ttnn.experimental.nlp_create_qkv_heads(fused, num_heads=NH, num_kv_heads=NKV,
                                                          transpose_k_heads=False)


@rejected("fill_cache", r"batch_idx 4 is outside the cache batch 4", "args.batch_idx < cache_tensor.padded_shape()[0]")
def fill_cache_batch_out_of_range(ttnn, device):  # non-paged fill_cache, the cache holds 4 users
    cache, k = kv_cache(ttnn, device, 4, 128, 64), tile(ttnn, device, rand(1, NKV, 64, 64))
    return lambda: ttnn.fill_cache(cache, k, 4)


@rejected("from_torch", r"BFLOAT8_B is a tile format: it needs layout=TILE_LAYOUT", "layout == Layout::TILE")
def bfp8_row_major(ttnn, device):  # block floats exist only as tiles
    return lambda: ttnn.from_torch(rand(1, 1, 32, 64), dtype=ttnn.bfloat8_b, layout=ttnn.ROW_MAJOR_LAYOUT,
                                   device=device)


@rejected("typecast", r"typecast to BFLOAT8_B needs a TILE tensor", "layout == Layout::TILE")
def typecast_row_major_to_bfp8(ttnn, device):
    x = ttnn.from_torch(rand(1, 1, 32, 64), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    return lambda: ttnn.typecast(x, ttnn.bfloat8_b)


@rejected("concat", r"all inputs must have the same dtype and layout", "in_ref.dtype() == first_input.dtype()")
def concat_mixed_dtypes(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 1, 32, 64)), tile(ttnn, device, rand(1, 1, 32, 64), ttnn.bfloat8_b)
    return lambda: ttnn.concat([a, b], dim=-1)


@rejected("add", r"shapes \[\[1, 1, 32, 64\], \[1, 1, 32, 96\]\] cannot be broadcast together",
          "Invalid subtile broadcast type")
def add_incompatible_shapes(ttnn, device):
    a, b = tile(ttnn, device, rand(1, 1, 32, 64)), tile(ttnn, device, rand(1, 1, 32, 96))
    return lambda: ttnn.add(a, b)


@rejected("reshape", r"shape \[1, 1, 32, 32\] has volume 1024, the input \[1, 1, 32, 64\] has 2048",
          "new_volume == old_volume")
def reshape_volume(ttnn, device):
    x = tile(ttnn, device, rand(1, 1, 32, 64))
    return lambda: ttnn.reshape(x, (1, 1, 32, 32))


INVALID = [fill_cache_dtype_mismatch, fill_cache_seq_too_long, fill_cache_batch_idx_out_of_range,
           fill_cache_head_dim_mismatch, fill_cache_batch_without_idx_tensor, update_cache_unsharded_input,
           update_cache_idxs_count, update_cache_page_table_not_int32, update_cache_idxs_not_int32,
           update_cache_bfp8_input, fused_update_overlapping_inputs, decode_causal_without_cur_pos,
           decode_cur_pos_batch, decode_page_table_batch, decode_mask_with_causal, decode_non_causal_k_chunk,
           decode_gqa_sharded_output, decode_fp32_q, decode_fp32_cache, unpaged_decode_k_chunk, linear_inner_dims,
           matmul_inner_dims, sdpa_causal_sq_ne_sk, sdpa_fp32_operands, sdpa_mask_with_causal, sdpa_mask_with_window,
           sdpa_mask_heads, sdpa_heads_not_divisible, chunked_sdpa_past_page_table,
           chunked_sdpa_start_not_chunk_multiple, rotary_bfp8_input, rotary_decode_interleaved,
           create_qkv_heads_bad_width, fill_cache_batch_out_of_range, bfp8_row_major, typecast_row_major_to_bfp8,
           concat_mixed_dtypes, add_incompatible_shapes, reshape_volume]
