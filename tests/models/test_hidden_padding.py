"""Zero-padding a hidden size that does not split over the chips (:mod:`tt_models.tt.hidden_padding`), checked
against HF's float32 models: HF's own model run on the padded weights (hidden size the padded one, epsilon scaled)
gives the unpadded model's logits, for each family's weight layout; the device's RMSNorm of a fractured padded row is
HF's norm of the real row. The padded models' logits against HF over 4 and 8 chips: ``test_tensor_parallel.py``
(Llama, Qwen3) and ``test_gpt_oss.py``."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from tt_models.models.llama.model import LlamaModel
from tt_models.runtime import close_device, open_device
from tt_models.testing import llama
from tt_models.testing.moe import tiny_moe
from tt_models.tt.hidden_padding import HiddenPadding
from tt_models.tt.norm import RMSNorm
from tt_models.tt.weights import as_tensor, to_host


def _tiny_llama(hidden: int = 160, eps: float = 1e-6) -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=hidden, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, vocab_size=300, rms_norm_eps=eps, attention_bias=True,
                         mlp_bias=True)
    model = AutoModelForCausalLM.from_config(config).eval()
    llama.perturb(model)
    return model


MODELS = {  # name -> (HF model, epsilon to run it at)
    # A large epsilon (the residual's mean square is about 1), so that a wrong epsilon shows in the logits; biases
    # on every projection.
    "llama with biases": lambda: _tiny_llama(eps=0.3),
    "gpt-oss": lambda: tiny_moe("gpt-oss-padded"),  # experts [E, dim, 2I] / [E, I, dim], router and down biases
    # Experts [E, 2I, dim] / [E, dim, I] and a dense layer. Its per-head Q/K norms share HF's epsilon (scaled with
    # the residual's in HF's padded model, not in ours), so it keeps the default one, 1e-6 (3e-5 of the logits).
    "qwen3-moe": lambda: tiny_moe("qwen3-moe"),
}


@pytest.mark.numerics
@pytest.mark.parametrize("name", list(MODELS))
def test_hf_on_the_padded_weights_gives_the_unpadded_logits(name):
    """HF's float32 model with the padded weights (:class:`~tt_models.tt.hidden_padding.PaddedState`, hidden size and
    epsilon as :meth:`HiddenPadding.args` sets them) computes the unpadded model's logits: every weight that reads or
    writes the residual is padded on the right dimension with zeros, the norms' ``sqrt(c)`` and ``c * eps`` exact."""
    hf = MODELS[name]()
    padding = HiddenPadding.of(hf.config.hidden_size, 4)
    assert padding is not None and padding.padded % 128 == 0 and padding.padded > hf.config.hidden_size
    config = copy.deepcopy(hf.config)
    config.hidden_size, config.rms_norm_eps = padding.padded, hf.config.rms_norm_eps * padding.real_share
    padded = AutoModelForCausalLM.from_config(config).eval()
    state = padding.state(hf.state_dict())
    padded.load_state_dict({name: state[name] for name in state})
    tokens = torch.randint(0, hf.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, ours = hf(tokens).logits, padded(tokens).logits
        naive = copy.deepcopy(config)
        naive.rms_norm_eps = hf.config.rms_norm_eps
        unscaled = AutoModelForCausalLM.from_config(naive).eval()
        unscaled.load_state_dict({name: state[name] for name in state})
        off = (unscaled(tokens).logits - expected).abs().max()
    error = (ours - expected).abs().max()
    print(f"\n{name}: max |logit error| {error:.2e} (logits up to {expected.abs().max():.1f}); "
          f"with the unscaled epsilon {off:.2e}")
    assert error < 1e-4 * expected.abs().max()
    if hf.config.rms_norm_eps > 0.01:  # the epsilon's scaling matters there
        assert off > 100 * error


@pytest.mark.numerics
def test_padded_norm_on_a_mesh_is_hf_norm():
    """The device's RMSNorm of a residual padded from 96 to 128 and fractured over 4 chips (all-gathered, then normed
    over the whole padded row) equals HF's float32 norm of the real row, its padding zero; with the unscaled weight
    and epsilon it is off by the padded width's share (what the scaling corrects)."""
    torch.manual_seed(0)
    hf = LlamaRMSNorm(96, eps=0.25)
    with torch.no_grad():
        hf.weight.normal_(1.0, 0.3)
    x = torch.randn(64, 96) * 0.5  # mean square 0.25: the epsilon counts as much as the input
    padding = HiddenPadding.of(96, 4)
    x_padded = torch.nn.functional.pad(x, (0, 32))[None, None]
    mesh = open_device("host", mesh_shape=(1, 4))
    try:
        outputs = {}
        for scaled in (True, False):
            weight = padding.weight("model.norm.weight", hf.weight.detach(), {}) if scaled else torch.nn.functional.pad(
                hf.weight.detach(), (0, 32))
            norm = RMSNorm(weight, 0.25 * padding.real_share if scaled else 0.25, mesh)
            outputs[scaled] = to_host(norm.forward(as_tensor(x_padded, mesh, shard_dim=-1)), mesh)[0, 0].float()
    finally:
        close_device(mesh)
    with torch.no_grad():
        expected = hf(x)
    ours, naive = outputs[True], outputs[False]
    error = float((ours[:, :96] - expected).norm() / expected.norm())
    naive_error = float((naive[:, :96] - expected).norm() / expected.norm())
    print(f"\nrelative error: {error:.4f} padded and scaled, {naive_error:.4f} padded alone")
    assert torch.equal(ours[:, 96:], torch.zeros(64, 32))
    assert error < 0.01 and naive_error > 0.05


def test_hidden_that_splits_is_not_padded():
    """A hidden size in whole tiles on every chip needs no padding; an image+text decoder (``pad_hidden`` off: its
    image tokens have the real width) refuses one that does not split, naming it."""
    assert HiddenPadding.of(256, 8) is None and HiddenPadding.of(2880, 2) is None
    assert HiddenPadding.of(2880, 8) == HiddenPadding(2880, 3072) and HiddenPadding.of(2880, 4).padded == 2944
    hf = _tiny_llama()
    mesh = open_device("host", mesh_shape=(1, 4))
    try:
        with pytest.raises(ValueError, match="hidden_size 160 cannot split over 4 chips"):
            LlamaModel(hf.config, hf.state_dict(), mesh, max_batch_size=4, max_seq_len=64, optimizations="accuracy")
    finally:
        close_device(mesh)


def test_misshapen_weight_is_refused():
    padding = HiddenPadding(160, 256)
    with pytest.raises(ValueError, match=r"shape \(300, 96\) should have the hidden size 160 in dimension -1"):
        padding.weight("lm_head.weight", torch.zeros(300, 96), {})
