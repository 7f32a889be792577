"""Issue 25 item 8: Llama 3.2 Vision built as a new user would (every parameter named "gate" set to 0.7, so every
text MLP's ``gate_proj`` too), a text-only prompt teacher-forced along HF's greedy continuation. Our logits have PCC
0.972 with HF float32 at position 16 (host backend, accuracy profile), >= 0.9998 at the 15 positions where HF in
bfloat16 is exact to 1e-4.

Not a bug: bf16 sensitivity of that input. With all ``gate_proj`` rows equal to 0.7, the gate of every MLP unit is
one number per position, ``g = 0.7 * sum(norm(h))``: a sum of 128 terms that nearly cancel at position 16 (the terms'
absolute sum is 52x ``|g|`` in layer 2, 38x in layer 4). A bf16 rounding of ``norm(h)`` moves ``g`` by that factor
more, relatively, and the MLP's output, ``silu(g) * down(up(x))``, moves with ``silu(g)``; there the MLP dominates the
residual, so layer 2 passes the amplified error to layer 4, which amplifies it again. HF itself in bfloat16 (the peer)
deviates the same way, more: 0.953 at position 16. Positions 5 to 7 cancel too (ours 0.989-0.999, HF bf16
0.995-0.9997).
"""

import copy
from typing import Any

import pytest
import torch
from transformers import MllamaConfig, MllamaForConditionalGeneration as HFMllama

from tests.closeness import pcc
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.runtime import use
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.weights import logits_to_host

PROMPT = [1, 68, 146, 163, 55, 46, 14, 266, 206, 76, 370, 351, 445]
GREEDY = [444, 444, 444, 444, 239, 405]  # HF float32's greedy continuation (checked below)
SEQUENCE = PROMPT + GREEDY
SENSITIVE = 16
MLP_LAYERS = (2, 4)  # the self-attention layers after the first (HF skips the cross layers 1 and 3 without an image)


def issue_model() -> HFMllama:
    """The issue's config: seed 0, every parameter whose name holds "gate" set to 0.7."""
    torch.manual_seed(0)
    vision = dict(hidden_size=64, attention_heads=2, intermediate_size=128, num_hidden_layers=3, num_global_layers=2,
                  image_size=56, patch_size=14, max_num_tiles=2, supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]],
                  intermediate_layers_indices=[0, 2], vision_output_dim=64 * 3)
    text = dict(vocab_size=512, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=5,
                cross_attention_layers=[1, 3], intermediate_size=256, rms_norm_eps=1e-5, bos_token_id=1,
                eos_token_id=2, pad_token_id=0)
    config = MllamaConfig(vision_config=vision, text_config=text, image_token_index=500)
    config._attn_implementation = "eager"
    model = HFMllama(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "gate" in name:
                param.fill_(0.7)
    return model


def hf_run(model: HFMllama) -> tuple[torch.Tensor, dict[int, tuple[torch.Tensor, torch.Tensor]]]:
    """Logits along ``SEQUENCE`` and, per MLP layer, the gate projection's input and output (float32)."""
    gates: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = [model.model.language_model.layers[i].mlp.gate_proj.register_forward_hook(
        lambda module, args, out, i=i: gates.__setitem__(i, (args[0][0].float(), out[0].float())))
        for i in MLP_LAYERS]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([SEQUENCE])).logits[0].float()
    for hook in hooks:
        hook.remove()
    return logits, gates


@pytest.fixture(scope="module")
def hf():
    model = issue_model()
    with torch.no_grad():
        greedy = model.generate(input_ids=torch.tensor([PROMPT]), max_new_tokens=len(GREEDY), do_sample=False,
                                eos_token_id=None, pad_token_id=0)[0, len(PROMPT):].tolist()
    assert greedy == GREEDY  # the issue's model, weight for weight
    return model


@pytest.fixture(scope="module")
def hf_runs(hf):
    """HF float32 (the reference) and HF bfloat16 (the peer)."""
    return hf_run(hf), hf_run(copy.deepcopy(hf).to(torch.bfloat16))


def ours_logits(hf: HFMllama, device: Any) -> torch.Tensor:
    """Our logits at every position of ``SEQUENCE`` (one text-only prefill, accuracy profile)."""
    model = MllamaForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, 1, max_seq_len=64,
                                                           optimizations="accuracy")
    text = model.models[0].text
    kv = model.allocate_kv_cache((2, text.args.n_kv_heads, 32, text.args.head_dim), torch.bfloat16,
                                 text.n_layers)[0]
    chunk = PrefillChunk.of(torch.tensor([0], dtype=torch.int32), 0, len(SEQUENCE), 32)
    with use(device):
        for x in text.prefill_layers(torch.tensor(SEQUENCE), chunk, torch.tensor([1]), None, kv):
            pass
        logits = text.lm_head.forward(text.norm.forward(x))  # the one tile holds every position
        return logits_to_host(logits, device, text.vocab_size)[0, 0, :len(SEQUENCE)].float()


def test_gate_sum_cancellation_amplifies_bf16_rounding(hf_runs):
    (reference, gates32), (peer, gates16) = hf_runs
    gate_errors = {}
    for i in MLP_LAYERS:
        x32, g32 = gates32[i]
        x16, g16 = gates16[i]
        assert torch.equal(g32, g32[:, :1].expand_as(g32))  # one gate value per position, shared by all units
        condition = 0.7 * x32.abs().sum(-1) / g32[:, 0].abs()
        # HF bf16's relative error of the gate's input and of the gate itself, per position
        input_error = (x16 - x32).norm(dim=-1) / x32.norm(dim=-1)
        gate_errors[i] = (g16[:, 0] - g32[:, 0]).abs() / g32[:, 0].abs()
        print(f"\nlayer {i} at {SENSITIVE}: condition {condition[SENSITIVE]:.0f}, HF bf16 gate input error "
              f"{input_error[SENSITIVE]:.4f} -> gate error {gate_errors[i][SENSITIVE]:.4f}")
        assert condition[SENSITIVE] > 30
        assert gate_errors[i][SENSITIVE] > 5 * input_error[SENSITIVE]
    # Layer 4's input error is layer 2's amplified one: its gate is off by a third.
    assert gate_errors[4][SENSITIVE] > 0.2
    scores = [pcc(peer[p], reference[p]) for p in range(len(SEQUENCE))]
    print("HF bf16 logits PCC per position: " + " ".join(f"{s:.5f}" for s in scores))
    assert scores[SENSITIVE] < 0.99


def test_ours_no_worse_than_hf_bf16_at_the_sensitive_position(host_device, hf, hf_runs):
    (reference, _), (peer, _) = hf_runs
    ours = ours_logits(hf, host_device)
    scores = [pcc(ours[p], reference[p]) for p in range(len(SEQUENCE))]
    peer_scores = [pcc(peer[p], reference[p]) for p in range(len(SEQUENCE))]
    print("\nours logits PCC per position: " + " ".join(f"{s:.5f}" for s in scores))
    assert scores[SENSITIVE] >= peer_scores[SENSITIVE]
    # Where no gate sum cancels (HF bf16 exact to 1e-4), ours is within 2e-4.
    exact = [p for p, s in enumerate(peer_scores) if s >= 0.9999]
    assert SENSITIVE not in exact and len(exact) == 15
    assert min(scores[p] for p in exact) >= 0.9998
