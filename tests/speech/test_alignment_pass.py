"""The alignment pass (``cross_attention_weights``, the contract extension word timestamps use) of a tiny random
Whisper, and of a tiny BART (post-norm, an encoder length that ends inside a tile): on the host backend its
probabilities against HF float32 eager cross-attention over the same tokens (accuracy profile; measured PCC 0.9999
and 1.0000), on the mock device the real ttnn's validation of every call in both profiles (values read back are zeros
there: shapes only). Nothing is written to the cache."""

from __future__ import annotations

import pytest
import torch

from tt_models.testing.seq2seq import CASES, encoder_input, tiny_seq2seq
from tt_models.tt.model_config import PROFILES

NAMES = ("whisper-multilingual", "bart")
HEADS = [[1, 1], [0, 1], [1, 0]]  # out of order, spread over the layers
MAX_BATCH, BLOCK, BLOCKS = 4, 32, 64
PCC = 0.999


def _pass(device, name: str, optimizations: str):
    """Prefill one request (its cross K/V into blocks 7, 3, ...), then the pass over 40 tokens; the weights, the
    model's tokens, encoder input and length, and whether the cache is as the prefill left it."""
    hf = tiny_seq2seq(name)
    model = CASES[name][2].from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH, optimizations=optimizations)
    replica = model.models[0]
    kv = model.allocate_kv_cache((BLOCKS, replica.kv_geometry[0], BLOCK, replica.args.head_dim), torch.bfloat16,
                                 replica.n_layers)
    ours, theirs, encoder_len = encoder_input(hf, 50, seed=0)
    blocks = -(-encoder_len // BLOCK)
    cross = torch.tensor([[7, 3, *range(10, 10 + blocks)][:blocks]], dtype=torch.int32)
    tokens = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(1))
    model.prefill_forward(tokens=tokens[None], page_table=torch.tensor([[1, 2]], dtype=torch.int32), kv_cache=kv,
                          prompt_lens=[40], cross_page_table=cross, encoder_inputs=[ours], encoder_lens=[encoder_len])
    before = model.read_kv_blocks(kv, range(BLOCKS))[0]
    [weights] = model.cross_attention_weights(kv, [tokens], cross, [encoder_len], HEADS)
    unchanged = torch.equal(model.read_kv_blocks(kv, range(BLOCKS))[0], before)
    return hf, weights, tokens, theirs, encoder_len, unchanged


@pytest.mark.numerics
@pytest.mark.parametrize("name", NAMES)
def test_alignment_pass_against_hf(host_device, name):
    hf, weights, tokens, theirs, encoder_len, unchanged = _pass(host_device, name, "accuracy")
    hf.config._attn_implementation = "eager"
    with torch.inference_mode():
        out = hf(**theirs, decoder_input_ids=tokens[None], output_attentions=True)
    expected = torch.stack([out.cross_attentions[layer][0, head] for layer, head in HEADS])
    assert weights.shape == expected.shape == (len(HEADS), len(tokens), encoder_len)
    pcc = torch.corrcoef(torch.stack([weights.flatten(), expected.flatten()]).double())[0, 1].item()
    print(f"\n{name}: alignment weights PCC {pcc:.5f}")
    assert pcc >= PCC, pcc
    assert torch.allclose(weights.sum(-1), torch.ones(len(HEADS), len(tokens)), atol=1e-4)
    assert unchanged


@pytest.mark.mock
@pytest.mark.parametrize("optimizations", PROFILES)
@pytest.mark.parametrize("name", NAMES)
def test_alignment_pass_on_mock(mock_device, name, optimizations):
    _, weights, tokens, _, encoder_len, _ = _pass(mock_device, name, optimizations)
    assert weights.shape == (len(HEADS), len(tokens), encoder_len)
