"""Valid op calls (see ``tests.mock.cases``): each returns its output tensor(s), which must agree between the real
ttnn on a mock device and the host backend."""

from __future__ import annotations

import math

import torch

from tests.mock.cases import (B, NH, NKV, decode_heads, hifi, ints, kv_cache, page_table, rand, rot_trans_mat,
                              sdpa_config, tile, user_sharded)


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
