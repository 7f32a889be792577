"""Whisper (English-only and multilingual), BART and MBart encoder, prefill and decode paths on the mock device,
in both optimization profiles (all bf16, or all bfloat8_b weights and KV cache): the real ttnn validates every
call; values read back are zeros there, so only shapes are checked."""

import pytest
import torch

from tests.models.seq2seq_reference import CASES, encoder_input, tiny_seq2seq
from tt_models.tt.model_config import PROFILES

pytestmark = pytest.mark.mock
MAX_BATCH, BLOCK = 4, 32


@pytest.mark.parametrize("optimizations", PROFILES)
@pytest.mark.parametrize("name", CASES)
def test_encoder_prefill_and_decode_on_mock(mock_device, name, optimizations):
    hf = tiny_seq2seq(name)
    model = CASES[name][2].from_state_dict(hf.config, hf.state_dict(), mock_device, MAX_BATCH,
                                           optimizations=optimizations)
    replica = model.models[0]
    kv = model.allocate_kv_cache((24, hf.config.decoder_attention_heads, BLOCK, replica.args.head_dim),
                                 torch.bfloat16, replica.n_layers)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=False, max_batch_size=MAX_BATCH, num_blocks=4)
    ours, _, encoder_len = encoder_input(hf, 50, seed=0)
    vocab = hf.config.vocab_size
    assert model.encode_forward([ours])[0].shape == (encoder_len, hf.config.d_model)
    logits = model.prefill_forward(
        tokens=torch.randint(0, 300, (2, 40)), page_table=torch.tensor([[5, 9, 0, 0], [1, 2, 0, 0]], dtype=torch.int32),
        kv_cache=kv, prompt_lens=[8, 40], start_pos=[0, 32], encoder_inputs=[ours, None],
        cross_page_table=torch.tensor([[7, 3, 11, 0], [12, 13, 0, 0]], dtype=torch.int32),
        encoder_lens=[encoder_len, encoder_len], empty_slots=[0, 3])
    assert logits.shape == (2, 1, vocab)
    logits = model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32), start_pos=torch.tensor([8, -1, -1, 40], dtype=torch.int32),
        page_table=torch.tensor([[5, 9, 0, 0], [0] * 4, [0] * 4, [1, 2, 0, 0]], dtype=torch.int32), kv_cache=kv,
        cross_page_table=torch.tensor([[7, 3, 11, 0], [0] * 4, [0] * 4, [12, 13, 0, 0]], dtype=torch.int32),
        encoder_lens=torch.tensor([encoder_len, 0, 0, encoder_len]), enable_trace=False)
    assert logits.shape == (MAX_BATCH, 1, vocab)
