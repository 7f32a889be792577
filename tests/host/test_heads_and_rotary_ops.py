"""Host head reshapes (``nlp_create_qkv_heads``, ``nlp_concat_heads`` and their decode forms) and rotary embedding
(``rotary_embedding_llama``) against explicit torch references: head reshapes are exact; rotary is within 1e-2
(absolute and relative) of a torch reference on the same bf16 inputs.
"""

import pytest
import torch

from tt_models.runtime import host

GRID = host.CoreCoord(8, 8)


@pytest.fixture(scope="module")
def dev():
    return host.open_device()


def tile(x, dtype, dev, **kw):
    return host.from_torch(x, getattr(host, dtype) if isinstance(dtype, str) else dtype, layout=host.TILE_LAYOUT,
                           device=dev, **kw)


# --- head reshapes and rotary ---------------------------------------------------------------------

@pytest.mark.parametrize("transpose_k, separate_kv", [(True, False), (False, False), (False, True)])
def test_nlp_create_qkv_heads(dev, transpose_k, separate_kv):
    b, s, nh, nkv, d = 2, 40, 8, 2, 32
    x = torch.randn(b, 1, s, (nh + 2 * nkv) * d)
    if separate_kv:
        q, k, v = host.experimental.nlp_create_qkv_heads(
            tile(x[..., :nh * d], "bfloat16", dev), tile(x[..., nh * d:], "bfloat16", dev), num_heads=nh,
            num_kv_heads=nkv, transpose_k_heads=transpose_k)
    else:
        q, k, v = host.experimental.nlp_create_qkv_heads(tile(x, "bfloat16", dev), num_heads=nh, num_kv_heads=nkv,
                                                         transpose_k_heads=transpose_k)
    xr = host.to_torch(tile(x, "bfloat16", dev)).float()
    ref_q = torch.stack([xr[:, 0, :, h * d:(h + 1) * d] for h in range(nh)], dim=1)
    ref_k = torch.stack([xr[:, 0, :, (nh + h) * d:(nh + h + 1) * d] for h in range(nkv)], dim=1)
    ref_v = torch.stack([xr[:, 0, :, (nh + nkv + h) * d:(nh + nkv + h + 1) * d] for h in range(nkv)], dim=1)
    assert torch.equal(q.value, ref_q) and torch.equal(v.value, ref_v)
    assert torch.equal(k.value, ref_k.transpose(-1, -2) if transpose_k else ref_k)
    assert torch.equal(host.experimental.nlp_concat_heads(q).value, xr[..., :nh * d])


def test_nlp_create_qkv_heads_decode_and_concat_decode(dev):
    users, nh, nkv, d = 5, 8, 2, 64
    x = torch.randn(1, 1, users, (nh + 2 * nkv) * d)
    q, k, v = host.experimental.nlp_create_qkv_heads_decode(tile(x, "bfloat16", dev), num_heads=nh, num_kv_heads=nkv,
                                                            overlap_qk_coregrid=False)
    xr = host.to_torch(tile(x, "bfloat16", dev)).float()
    assert torch.equal(q.value, xr[0, 0, :, :nh * d].reshape(1, users, nh, d))
    assert torch.equal(k.value, xr[0, 0, :, nh * d:(nh + nkv) * d].reshape(1, users, nkv, d))
    assert torch.equal(v.value, xr[0, 0, :, (nh + nkv) * d:].reshape(1, users, nkv, d))
    for t in (q, k, v):
        spec = t.memory_config().shard_spec
        assert t.memory_config().memory_layout == host.TensorMemoryLayout.HEIGHT_SHARDED
        assert spec.num_cores() == users and list(spec.shape) == [32, d]
    assert not q.memory_config().shard_spec.grid.intersects(k.memory_config().shard_spec.grid)
    out = host.experimental.nlp_concat_heads_decode(q, num_heads=nh)
    assert list(out.shape) == [1, 1, 32, nh * d]  # the real op reports the padded tile of users
    assert torch.equal(out.value[:, :, :users], xr[..., :nh * d])
    assert out.memory_config().memory_layout == host.TensorMemoryLayout.WIDTH_SHARDED


def rot_transformation_mat() -> torch.Tensor:
    """tt_transformers' get_rot_transformation_mat."""
    t = torch.zeros(1, 1, 32, 32)
    t[..., torch.arange(0, 32, 2), torch.arange(1, 32, 2)] = 1
    t[..., torch.arange(1, 32, 2), torch.arange(0, 32, 2)] = -1
    return t


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved pairs: out[2k] = x[2k] c - x[2k+1] s, out[2k+1] = x[2k+1] c + x[2k] s."""
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos[..., 0::2] - x[..., 1::2] * sin[..., 0::2]
    out[..., 1::2] = x[..., 1::2] * cos[..., 1::2] + x[..., 0::2] * sin[..., 1::2]
    return out


def cos_sin(positions: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    theta = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    angles = (positions.float()[:, None] * theta).repeat_interleave(2, dim=-1)
    return angles.cos(), angles.sin()


@pytest.mark.parametrize("d", [64, 128])
def test_rotary_embedding_llama_prefill(dev, d):
    x = torch.randn(1, 4, 50, d)
    cos, sin = cos_sin(torch.arange(50), d)
    xt, ct, st_ = (tile(t, "bfloat16", dev) for t in (x, cos[None, None], sin[None, None]))
    out = host.experimental.rotary_embedding_llama(xt, ct, st_, tile(rot_transformation_mat(), "bfloat16", dev))
    ref = rope_reference(xt.value, ct.value, st_.value)
    assert out.dtype == host.bfloat16
    assert torch.allclose(out.value, ref, atol=1e-2, rtol=1e-2)


def test_rotary_embedding_llama_decode(dev):
    users, heads, d = 3, 8, 64
    x = torch.randn(1, users, heads, d)
    cos, sin = cos_sin(torch.tensor([0, 7, 300]), d)
    cos, sin = cos[None, :, None, :].expand(1, users, 32, d), sin[None, :, None, :].expand(1, users, 32, d)

    def sharded(t, rows):
        mc = host.MemoryConfig(host.TensorMemoryLayout.HEIGHT_SHARDED, host.BufferType.L1,
                               host.ShardSpec(host.num_cores_to_corerangeset(users, GRID, True), (rows, d),
                                              host.ShardOrientation.ROW_MAJOR))
        return tile(t.contiguous(), "bfloat16", dev, memory_config=mc)

    xt, ct, st_ = sharded(x, 32), sharded(cos, 32), sharded(sin, 32)
    trans = tile(rot_transformation_mat().repeat(1, 1, users, 1), "bfloat16", dev)
    out = host.experimental.rotary_embedding_llama(xt, ct, st_, trans, is_decode_mode=True)
    ref = rope_reference(xt.value, ct.value[:, :, :1], st_.value[:, :, :1])
    assert torch.allclose(out.value, ref, atol=1e-2, rtol=1e-2)


# --- rejected calls -------------------------------------------------------------------------------

def _height_sharded(t: torch.Tensor, dev, dtype="bfloat16"):
    cores = host.num_cores_to_corerangeset(t.shape[1], GRID, True)
    mc = host.MemoryConfig(host.TensorMemoryLayout.HEIGHT_SHARDED, host.BufferType.L1,
                           host.ShardSpec(cores, (32, t.shape[-1]), host.ShardOrientation.ROW_MAJOR))
    return tile(t, dtype, dev, memory_config=mc)


@pytest.mark.parametrize("case", ["non-BF16 input", "head dim > 256", "fp32 dest with head dim > 128",
                                  "head dim not tile aligned", "prefill cos length != seq",
                                  "decode with an interleaved input", "decode cos batch != users"])
def test_rotary_embedding_llama_rejects(dev, case):
    d = {"head dim > 256": 512, "fp32 dest with head dim > 128": 192, "head dim not tile aligned": 48}.get(case, 64)
    x = torch.randn(1, 2, 32, d)
    cos = torch.randn(1, 1, 16 if "cos length" in case else 32, d)
    trans = tile(rot_transformation_mat(), "bfloat16", dev)
    config = host.WormholeComputeKernelConfig(fp32_dest_acc_en="fp32" in case)
    decode = case.startswith("decode")
    if case == "decode cos batch != users":
        xt, ct = _height_sharded(x, dev), _height_sharded(torch.randn(1, 3, 32, d), dev)
    else:
        xt, ct = tile(x, "bfloat8_b" if case == "non-BF16 input" else "bfloat16", dev), tile(cos, "bfloat16", dev)
    with pytest.raises(host.TTFatal, match="rotary_embedding_llama"):
        host.experimental.rotary_embedding_llama(xt, ct, ct, trans, is_decode_mode=decode,
                                                 compute_kernel_config=config)


def test_create_qkv_heads_decode_rejects_more_than_32_users(dev):
    with pytest.raises(host.TTFatal, match="nlp_create_qkv_heads_decode"):
        host.experimental.nlp_create_qkv_heads_decode(tile(torch.randn(1, 1, 33, 384), "bfloat16", dev), num_heads=8,
                                                      num_kv_heads=2)
