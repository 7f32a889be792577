"""The mixture-of-experts block (:mod:`tt_models.tt.moe`) against HF's float32 blocks on the host backend: Qwen3-MoE's
``Qwen3MoeSparseMoeBlock`` (softmax, top-k, renormalized; SwiGLU experts) and GPT-OSS's ``GptOssMLP`` (router bias,
top-k then softmax; clamped gated experts with interleaved gate/up and their biases), on one chip and with the experts
over two (the routed down biases added to each chip's slice of the fractured output), and GPT-OSS's with another
``swiglu_alpha`` and ``swiglu_limit`` in its config (read from it: HF's block with OpenAI's 1.702 and 7 instead
parts from it, asserted). Rows of 40 tokens route to every expert (asserted). PCC >= 0.9999 with bfloat16 experts,
>= 0.999 with bfloat8_b."""

import pytest
import torch
from transformers import GptOssConfig

from tests.closeness import pcc
from tt_models.runtime import close_device, open_device
from tt_models.runtime import host as ttnn
from tt_models.testing.moe import GPT_OSS_BLOCK, tiny_gpt_oss_block, tiny_moe
from tt_models.tt.model_config import ExpertArgs
from tt_models.tt.moe import MoE
from tt_models.tt.weights import as_tensor, to_host

TOKENS = 40
# GPT-OSS's activation with a limit that clamps many of the tiny block's gate and up values (7 clamps none).
SWIGLU = dict(swiglu_alpha=1.0, swiglu_limit=0.75)


def _qwen3():
    hf = tiny_moe("qwen3-moe")
    block = hf.model.layers[0].mlp
    return block, ExpertArgs.from_hf(hf.config), lambda x: block(x)


def _gpt_oss(**config):
    block = tiny_gpt_oss_block(**config)
    return block, ExpertArgs.from_hf(GptOssConfig(**GPT_OSS_BLOCK | config)), lambda x: block(x)[0]


FAMILIES = {"qwen3-moe": _qwen3, "gpt-oss": _gpt_oss, "gpt-oss-swiglu": lambda: _gpt_oss(**SWIGLU)}


def _router(block) -> torch.nn.Module:
    return block.router if hasattr(block, "router") else block.gate


def _input(block) -> torch.Tensor:
    return torch.randn(1, TOKENS, _router(block).weight.shape[1], generator=torch.Generator().manual_seed(1))


@pytest.mark.numerics
@pytest.mark.parametrize("chips", [1, 2])
@pytest.mark.parametrize("dtype, threshold", [(ttnn.bfloat16, 0.9999), (ttnn.bfloat8_b, 0.999)])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_block_matches_hf(family, dtype, threshold, chips):
    block, experts, reference = FAMILIES[family]()
    x = _input(block)
    with torch.no_grad():
        expected = reference(x)[0]
        router = _router(block)
        chosen = torch.nn.functional.linear(x[0], router.weight, getattr(router, "bias", None)).topk(experts.top_k)
    assert set(chosen.indices.flatten().tolist()) == set(range(experts.n_experts))
    mesh = open_device("host", mesh_shape=(1, chips))
    try:
        moe = MoE({f"mlp.{k}": v for k, v in block.state_dict().items()}, "mlp.", experts, mesh, dtype)
        out = to_host(moe.forward(as_tensor(x[None], mesh)), mesh, concat_dim=-1)[0, 0]
    finally:
        close_device(mesh)
    score = pcc(out, expected)
    print(f"\n{family} {dtype.name} over {chips} chips: PCC {score:.6f}")
    assert score >= threshold


def test_the_swiglu_config_changes_the_block():
    """HF's block with ``SWIGLU`` and with OpenAI's constants (same weights) differ: PCC < 0.99."""
    block, _, reference = _gpt_oss(**SWIGLU)
    x = _input(block)
    with torch.no_grad():
        ours = reference(x)[0]
        block.experts.alpha, block.experts.limit = 1.702, 7.0
        constants = reference(x)[0]
    print(f"\nswiglu {SWIGLU} against (1.702, 7): PCC {pcc(ours, constants):.4f}")
    assert pcc(ours, constants) < 0.99


def test_experts_that_do_not_split_are_refused():
    block, experts, _ = _qwen3()
    mesh = open_device("host", mesh_shape=(1, 16))
    try:
        with pytest.raises(ValueError, match="8 experts of width 32 cannot split over 16 chips"):
            MoE({f"mlp.{k}": v for k, v in block.state_dict().items()}, "mlp.", experts, mesh, ttnn.bfloat16)
    finally:
        close_device(mesh)
