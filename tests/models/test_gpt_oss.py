"""GPT-OSS (``GptOssForCausalLM``: attention sinks, sliding-window and full layers alternating, YaRN rotary, biased
projections, routed experts with biases and a clamped gated activation in every layer) driven as TT vLLM drives it,
on the host backend against HF's float32 eager model.

The shared routed-expert tests of :mod:`tests.models.moe_cases` run on a tiny config (a sliding layer of window 16
and a full one, YaRN from 32 positions) whose sequences (up to 69 tokens) reach past the window and the original
context in prefill and decode, with its attention made to count (:func:`tt_models.testing.moe.perturb_experts`:
without the sinks, the window or YaRN's attention factor HF's own logits part from themselves to a PCC of 0.64, 0.45
and 0.68, asserted below). Accuracy profile: PCC >= 0.99 at every step (min 0.9992 measured);
the performance profile (bfloat8_b attention, bfloat4_b experts) is held to a median >= 0.95 (0.990 measured, min
0.95). Here too: the rotary frequencies and attention factor are HF's own YaRN ones, and an MXFP4
checkpoint loads through the normal loader (dequantized by transformers' own function), with the error of its
conversion to the profiles' block-float formats stated.
"""

import copy

import pytest
import torch
from safetensors.torch import load_file
from transformers.integrations.mxfp4 import convert_moe_packed_tensors
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

from tests.closeness import pcc
from tests.models import moe_cases as shared
from tt_models.checkpoints.loader import load_hf_checkpoint
from tt_models.models.llama.generator import GptOssForCausalLM
from tt_models.runtime import close_device, open_device
from tt_models.testing.moe import TINY_CONFIGS, save_mxfp4, tiny_moe
from tt_models.tt.model_config import PROFILES
from tt_models.tt.rope import RotarySetup
from tt_models.tt.weights import to_host

FAMILY = shared.MoeFamily(generator=GptOssForCausalLM, configs=("gpt-oss",), tp_config="gpt-oss-tp",
                          performance_median=0.95)
# The shared fixtures, and tests (in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
model_case = shared.model_case_fixture(FAMILY)
test_every_expert_is_routed = shared.test_every_expert_is_routed
test_teacher_forced_steps_match_hf = shared.test_teacher_forced_steps_match_hf
test_free_running_greedy_agrees_with_hf_generate = shared.test_free_running_greedy_agrees_with_hf_generate
test_experts_per_chip_are_one_nth = shared.test_experts_per_chip_are_one_nth
test_experts_over_chips_give_the_one_chip_tokens = shared.test_experts_over_chips_give_the_one_chip_tokens
test_traced_decode_equals_eager = shared.test_traced_decode_equals_eager


def test_rotary_is_hf_yarn(host_device):
    """The rotary frequencies and the attention factor multiplying cos/sin are HF's own YaRN ones (from its
    ``ROPE_INIT_FUNCTIONS``, as GptOssRotaryEmbedding takes them), the factor not 1."""
    config = TINY_CONFIGS["gpt-oss"]()
    hf = GptOssRotaryEmbedding(config)
    ours = RotarySetup(config, config.head_dim, host_device, 32)
    assert torch.equal(ours.inv_freq, hf.inv_freq.float()) and ours.scaling == hf.attention_scaling > 1.1
    positions = torch.arange(100)
    cos, sin = hf(torch.zeros(1), positions[None])
    assert torch.allclose(ours.cos_sin(positions)[0][:, ::2], cos[0], atol=1e-6)
    assert torch.allclose(ours.cos_sin(positions)[1][:, ::2], sin[0], atol=1e-6)


@pytest.mark.parametrize("feature", ["sinks", "window", "yarn"])
def test_sinks_window_and_yarn_show_in_the_logits(model_case, feature):
    """The tests' sequences exercise each of GPT-OSS's attention features: HF's own logits without it (sinks at
    -inf, every layer full, YaRN's attention factor 1) part from its logits with it (min PCC over the positions
    < 0.99), so a model leaving it out fails the teacher-forced test."""
    hf = copy.deepcopy(model_case.hf)
    with torch.no_grad():
        for layer in hf.model.layers:
            if feature == "sinks":
                layer.self_attn.sinks.fill_(float("-inf"))
            elif feature == "window":
                layer.self_attn.sliding_window = None
        if feature == "window":
            hf.config.layer_types = ["full_attention"] * hf.config.num_hidden_layers
        if feature == "yarn":
            hf.model.rotary_emb.attention_scaling = 1.0
        scores = [min(pcc(a, b) for a, b in zip(hf(seq[None]).logits[0], logits))
                  for seq, logits in zip(model_case.sequences, model_case.logits)]
    print(f"\nwithout {feature}: min PCC {min(scores):.4f}")
    assert min(scores) < 0.99


def test_mxfp4_checkpoint_loads_and_converts(tmp_path, host_device):
    """An MXFP4 checkpoint (``*_blocks``/``*_scales``, as OpenAI's) loads through the normal loader into transformers'
    own dequantization of it (``convert_moe_packed_tensors``, float32: exact), and the profiles store those values as
    block floats: bfloat8_b (accuracy) holds them exactly here (an FP4 value has 2 significant bits and bfloat8_b's 7
    mantissa bits span the scales of the values sharing its exponent), bfloat4_b (performance) with a mean error of
    7.8% of the mean magnitude, at most 12.5% of the largest (3 mantissa bits)."""
    hf = tiny_moe("gpt-oss")
    save_mxfp4(hf, tmp_path)
    checkpoint = load_hf_checkpoint(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    for name in ("gate_up_proj", "down_proj"):
        prefix = f"model.layers.1.mlp.experts.{name}"
        reference = convert_moe_packed_tensors(stored[f"{prefix}_blocks"], stored[f"{prefix}_scales"],
                                               dtype=torch.float32)
        assert torch.equal(checkpoint.state_dict[prefix], reference)
        relative = (reference - hf.state_dict()[prefix]).norm() / hf.state_dict()[prefix].norm()
        assert 0 < relative < 0.15  # MXFP4's own rounding of the float32 weights
    gate_up = checkpoint.state_dict["model.layers.0.mlp.experts.gate_up_proj"]  # [E, dim, 2I], gate columns even
    dequantized = gate_up[..., 0::2].permute(1, 0, 2).reshape(gate_up.shape[1], -1)  # the [dim, E * I] operand
    errors = {}
    for profile in PROFILES:
        model = GptOssForCausalLM.from_state_dict(checkpoint.config, checkpoint.state_dict, host_device, 4,
                                                  max_seq_len=128, optimizations=profile)
        error = (to_host(model.models[0].layers[0].feed_forward.gate.weight, host_device)[0, 0] - dequantized).abs()
        errors[profile] = (float(error.max() / dequantized.abs().max()), float(error.mean() / dequantized.abs().mean()))
    print(f"\nMXFP4 -> block float, (max |error| / max |w|, mean |error| / mean |w|): {errors}")
    assert errors["accuracy"] == (0.0, 0.0)
    assert errors["performance"][0] < 0.15 and errors["performance"][1] < 0.1


@pytest.fixture(scope="module")
def padded_case(tmp_path_factory) -> shared.ModelCase:
    return shared.build_case("gpt-oss-padded", tmp_path_factory.mktemp("gpt-oss-padded"))


@pytest.mark.numerics
@pytest.mark.parametrize("chips", [4, 8])
def test_unsplittable_hidden_padded_over_chips(padded_case, chips):
    """A hidden size that does not split into whole tiles per chip (160: 5 tiles, as 2880's 90 on a T3K), zero-padded
    to 256 (:mod:`tt_models.tt.hidden_padding`), with experts whose width does not split either: teacher-forced logits
    PCC >= 0.99 against HF float32 at every prefill and decode step (accuracy profile; the near-tie rule of
    :func:`tests.models.moe_cases.assert_accurate`), the per-chip KV heads the unpadded model's, and free-running
    greedy tokens following one chip's (unpadded there) under the closeness rule. The tokens reach every expert.

    (Hidden 96, padded to 128 and 256, routes one token otherwise than HF at a router gap of 0.104, just past the
    near-tie bound, on 2, 4 and 8 chips and when padded on one chip: the padding's bfloat16 rounding, not an error.)"""
    assert (padded_case.counts > 0).all()
    mesh = open_device("host", mesh_shape=(1, chips))
    try:
        scores, tied = shared.teacher_forced_scores(FAMILY, padded_case, mesh, "accuracy")
        model = GptOssForCausalLM.from_state_dict(padded_case.hf.config, padded_case.hf.state_dict(), mesh, 4,
                                                  max_seq_len=128, optimizations="accuracy")
        args = model.models[0].args
        assert args.dim == 256 and model.models[0].kv_geometry == (1, 32)
    finally:
        close_device(mesh)
    shared.assert_accurate(scores, tied)
    shared.assert_greedy_follows_one_chip(FAMILY, padded_case.hf, chips)
