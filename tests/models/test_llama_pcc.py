"""Llama-family layers and logits against HF transformers (tiny random configs, host backend).

Thresholds: PCC >= 0.999 in the "accuracy" profile (bf16 attention weights, bfloat8_b MLP, bf16 KV cache)
and >= 0.99 in the "performance" profile (bfloat8_b attention, bfloat4_b MLP, bfloat8_b KV cache).
"""

import pytest
import torch

from tests.closeness import pcc
from tt_models.models.llama.model import LlamaModel
from tt_models.runtime import use
from tt_models.testing.llama import TINY_CONFIGS, tiny_model
from tt_models.tt.kv_cache import allocate_paged_kv_cache
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.weights import to_host

THRESHOLD = {"accuracy": 0.999, "performance": 0.99}
BLOCK = 32
SEQ = 45  # not a multiple of the tile


def _hf_layer_outputs(model, tokens):
    outputs = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0] if isinstance(out, tuple) else out))
             for layer in model.model.layers]
    with torch.no_grad():
        logits = model(tokens[None]).logits[0]
    for h in hooks:
        h.remove()
    return [o.reshape(-1, o.shape[-1]) for o in outputs], logits


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_prefill_layers_and_logits_match_hf(host_device, name, profile):
    hf = tiny_model(name)
    tokens = torch.randint(0, hf.config.vocab_size, (SEQ,), generator=torch.Generator().manual_seed(1))
    hf_layers, hf_logits = _hf_layer_outputs(hf, tokens)
    with use(host_device):
        model = LlamaModel(hf.config, hf.state_dict(), host_device, max_batch_size=4, max_seq_len=256,
                           optimizations=profile)
        kv = allocate_paged_kv_cache((8, hf.config.num_key_value_heads, BLOCK, model.args.head_dim),
                                     model.args.n_layers, model.precision.kv_cache, host_device)
        page_table = torch.tensor([5, 2, 7, 0], dtype=torch.int32)
        chunk = PrefillChunk.of(page_table, 0, SEQ, BLOCK)
        states = [to_host(x, host_device)[0, 0, :SEQ] for x in model.prefill_layers(tokens, chunk, kv)]
        logits = model.prefill(tokens, 0, SEQ, page_table, kv)
    layer_pcc = [pcc(ours, ref) for ours, ref in zip(states[1:], hf_layers)]
    logits_pcc = pcc(logits, hf_logits[-1])
    print(f"\n{name} {profile}: layer PCC {[round(p, 5) for p in layer_pcc]}, logits PCC {logits_pcc:.5f}")
    assert len(layer_pcc) == hf.config.num_hidden_layers
    assert min(layer_pcc) >= THRESHOLD[profile], layer_pcc
    assert logits_pcc >= THRESHOLD[profile]
