"""Per-chip device memory of tensor-parallel replicas, measured from the tensors they hold (host backend).

A Llama whose every split dimension divides into whole tiles on up to 8 chips (hidden 256, 8 heads, 4 KV heads,
MLP 512, vocabulary 512): on N chips each chip holds exactly 1/N of the one-chip weights that split, plus its own
copy of those that do not (norms, rotary matrices, the cos/sin table decode looks its rows up in), and its KV blocks
hold ``4 // min(N, 4)`` heads: 1/N of the one-chip KV up to 4 chips, 1/4 on 8 (each KV head replicated on 2 chips,
and with it its K/V projection columns).
"""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.runtime import close_device, open_device
from tt_models.runtime import host as ttnn
from tt_models.tt.memory import bytes_per_chip, device_tensors, tensor_bytes, tile_bytes as dtype_tile_bytes
from tt_models.tt.model_config import Precision


def tile_bytes(profile: str) -> int:
    """Bytes of one tile of attention weights in ``profile``."""
    return dtype_tile_bytes(Precision.for_profile(profile).attention_weights)

KV_HEADS, BLOCKS, BLOCK = 4, 16, 32


@pytest.fixture(scope="module")
def hf():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=KV_HEADS, head_dim=32, vocab_size=512, max_position_embeddings=256)
    return AutoModelForCausalLM.from_config(config).eval()


def _replicated(t) -> bool:
    shards = ttnn.get_device_tensors(t)
    return all(torch.equal(s.value, shards[0].value) for s in shards[1:])


def _measure(hf, chips, profile):
    mesh = open_device("host", mesh_shape=(1, chips))
    try:
        model = LlamaForCausalLM.from_state_dict(hf.config, hf.state_dict(), mesh, 4, max_seq_len=128,
                                                 optimizations=profile)
        replica = model.models[0]
        heads, head_dim = replica.kv_geometry
        kv = model.allocate_kv_cache((BLOCKS, heads, BLOCK, head_dim), None, replica.n_layers)
        replicated = sum(tensor_bytes(t) for t in device_tensors(replica) if chips > 1 and _replicated(t))
        whole = bytes_per_chip([replica.rope, replica.rotary_table, replica.norm,
                                [(l.attention_norm, l.ffn_norm) for l in replica.layers]])
        return bytes_per_chip(replica), replicated, bytes_per_chip(kv), heads, whole
    finally:
        close_device(mesh)


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_weights_and_kv_per_chip_are_one_nth(hf, profile):
    one_chip, _, one_chip_kv, _, whole = _measure(hf, 1, profile)
    print(f"\n{profile}: one chip {one_chip} B weights, {one_chip_kv} B KV")
    for chips in (2, 4, 8):
        weights, replicated, kv, heads, _ = _measure(hf, chips, profile)
        print(f"{chips} chips: {weights} B weights per chip ({replicated} B replicated), {kv} B KV per chip")
        # K/V projection columns beyond a 1/N share: a chip holds whole KV heads, replicated when heads < chips.
        kv_columns = 2 * 32 * (heads - KV_HEADS / chips)
        extra = int(hf.config.num_hidden_layers * 256 * kv_columns) // 1024 * tile_bytes(profile)
        assert weights == (one_chip - replicated) // chips + replicated + extra
        assert replicated == whole  # only the norms and the rotary matrices and table are whole on every chip
        assert heads == KV_HEADS // min(chips, KV_HEADS)
        assert kv == one_chip_kv // min(chips, KV_HEADS)
