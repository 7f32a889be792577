"""The swap extension (``read_kv_blocks`` / ``write_kv_blocks``): KV blocks to host memory and back.

On the host backend a block read after being written holds what was written, within the rounding of the cache's
dtype (bf16 for the accuracy profile, bfloat8_b for performance), every other block is untouched, and moving a
block to another block id moves its values exactly. On the mock device the real ttnn validates the calls.
"""

import pytest
import torch

from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.runtime import close_device, open_device
from tt_models.runtime import host as ttnn
from tt_models.testing.llama import tiny_model

NUM_BLOCKS, BLOCK = 8, 32


def _generator(device, optimizations):
    hf = tiny_model("llama-gqa")
    model = LlamaForCausalLM.from_state_dict(hf.config, hf.state_dict(), device, 4, max_seq_len=128,
                                             optimizations=optimizations)
    args = model.models[0].args
    kv = model.allocate_kv_cache((NUM_BLOCKS, model.models[0].kv_geometry[0], BLOCK, args.head_dim), torch.bfloat16,
                                 args.n_layers)
    return model, kv, args


@pytest.mark.parametrize("optimizations", ["accuracy", "performance"])
def test_blocks_round_trip_on_host(host_device, optimizations):
    model, kv, args = _generator(host_device, optimizations)
    values = torch.randn(args.n_layers, 2, 3, args.n_kv_heads, BLOCK, args.head_dim)
    model.write_kv_blocks(kv, [5, 1, 6], [values])
    (stored,) = model.read_kv_blocks(kv, [5, 1, 6])
    assert stored.shape == values.shape
    assert torch.allclose(stored, values, rtol=0.07, atol=0.07)  # rounded to bf16 / bfloat8_b
    # What a block holds survives a move to another block exactly: swap-out then swap-in changes nothing.
    model.write_kv_blocks(kv, [0, 2, 3], [stored])
    assert torch.equal(model.read_kv_blocks(kv, [0, 2, 3])[0], stored)
    assert not model.read_kv_blocks(kv, [4, 7])[0].any(), "blocks not written stay zero"


def test_blocks_round_trip_on_a_tensor_parallel_mesh():
    """On a 1x2 mesh each chip holds one of the two KV heads: a block read holds both chips' heads (chip order) and
    writing it back gives each chip its own."""
    mesh = open_device("host", mesh_shape=(1, 2))
    try:
        model, kv, args = _generator(mesh, "accuracy")
        values = torch.randn(args.n_layers, 2, 2, args.n_kv_heads, BLOCK, args.head_dim).bfloat16().float()
        model.write_kv_blocks(kv, [3, 6], [values])
        (stored,) = model.read_kv_blocks(kv, [3, 6])
        assert torch.equal(stored, values)
        chip1 = ttnn.get_device_tensors(kv[0][0][0])[1].to_torch().float()  # layer 0's K on the second chip
        assert torch.equal(chip1[3, 0], values[0, 0, 0, 1])
    finally:
        close_device(mesh)


@pytest.mark.mock
def test_blocks_round_trip_on_mock(mock_device):
    model, kv, args = _generator(mock_device, "performance")
    model.write_kv_blocks(kv, [5, 1], [torch.randn(args.n_layers, 2, 2, args.n_kv_heads, BLOCK, args.head_dim)])
    (stored,) = model.read_kv_blocks(kv, [5, 1])
    assert stored.shape == (args.n_layers, 2, 2, args.n_kv_heads, BLOCK, args.head_dim)
