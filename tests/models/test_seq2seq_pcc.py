"""Whisper and BART against HF transformers (tiny random configs, host backend): encoder output, the cross
K/V written to the paged cache, every decoder layer and the logits, PCC >= 0.99 in both profiles
("accuracy": bfloat16 weights and KV; "performance": bfloat8_b weights and KV)."""

import pytest
import torch

from tests.closeness import pcc
from tt_models.runtime import host, use
from tt_models.testing.seq2seq import CASES, encoder_input, tiny_seq2seq
from tt_models.tt.paged_inputs import PrefillChunk

THRESHOLD = 0.99
BLOCK, NUM_BLOCKS = 32, 16
DECODER_LEN = 37


def _decoder_layer_outputs(hf, hf_inputs, decoder_ids):
    outputs = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0] if isinstance(out, tuple) else out))
             for layer in hf.model.decoder.layers]
    with torch.no_grad():
        result = hf(**hf_inputs, decoder_input_ids=decoder_ids[None])
    for h in hooks:
        h.remove()
    return result.encoder_last_hidden_state[0], [o[0] for o in outputs], result.logits[0]


def _cache_rows(cache, blocks, length):
    """``[heads, length, head_dim]`` read back from the paged cache through a block list."""
    values = host.to_torch(cache).float()[blocks]  # [n, heads, bs, d]
    return values.permute(1, 0, 2, 3).reshape(values.shape[1], -1, values.shape[3])[:, :length]


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
@pytest.mark.parametrize("name", list(CASES))
def test_encoder_cross_kv_layers_and_logits_match_hf(host_device, name, profile):
    hf = tiny_seq2seq(name)
    ours_input, hf_inputs, encoder_len = encoder_input(hf, 45, seed=1)
    decoder_ids = torch.randint(3, hf.config.vocab_size, (DECODER_LEN,), generator=torch.Generator().manual_seed(2))
    hf_encoder, hf_layers, hf_logits = _decoder_layer_outputs(hf, hf_inputs, decoder_ids)

    model = CASES[name][2].from_state_dict(hf.config, hf.state_dict(), host_device, 4, optimizations=profile)
    replica = model.models[0]
    kv = model.allocate_kv_cache((NUM_BLOCKS, hf.config.decoder_attention_heads, BLOCK, replica.args.head_dim),
                                 torch.bfloat16, replica.n_layers)[0]
    cross_blocks = torch.tensor([9, 2, 14], dtype=torch.int32)[: -(-encoder_len // BLOCK)]
    self_blocks = torch.tensor([5, 11], dtype=torch.int32)
    with use(host_device):
        encoder_states = replica.encoder.forward(ours_input[CASES[name][2].encoder_input_key])
        replica.decoder.fill_cross(encoder_states, encoder_len, cross_blocks, kv)
        chunk = PrefillChunk.of(self_blocks, 0, DECODER_LEN, BLOCK)
        states = [host.to_torch(x)[0, 0, :DECODER_LEN].float()
                  for x in replica.decoder.prefill_layers(decoder_ids, chunk, cross_blocks, encoder_len, kv)]
        logits = replica.decoder.prefill(decoder_ids, 0, DECODER_LEN, self_blocks, cross_blocks, encoder_len, kv)
    scores = {"encoder": pcc(host.to_torch(encoder_states)[0, 0].float(), hf_encoder)}
    heads, head_dim = hf.config.decoder_attention_heads, replica.args.head_dim
    for i, layer in enumerate(hf.model.decoder.layers):
        with torch.no_grad():
            k_ref = layer.encoder_attn.k_proj(hf_encoder).reshape(encoder_len, heads, head_dim).transpose(0, 1)
            v_ref = layer.encoder_attn.v_proj(hf_encoder).reshape(encoder_len, heads, head_dim).transpose(0, 1)
        scores[f"cross K {i}"] = pcc(_cache_rows(kv[i][0], cross_blocks, encoder_len), k_ref)
        scores[f"cross V {i}"] = pcc(_cache_rows(kv[i][1], cross_blocks, encoder_len), v_ref)
        scores[f"layer {i}"] = pcc(states[i + 1], hf_layers[i])
    scores["logits"] = pcc(logits, hf_logits[-1])
    print(f"\n{name} {profile}: " + ", ".join(f"{k} {v:.5f}" for k, v in scores.items()))
    assert min(scores.values()) >= THRESHOLD, scores
