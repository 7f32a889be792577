"""The mixture-of-experts block (:mod:`tt_models.tt.moe`) against HF's float32 blocks on the host backend: Qwen3-MoE's
``Qwen3MoeSparseMoeBlock`` (softmax, top-k, renormalized; SwiGLU experts) and GPT-OSS's ``GptOssMLP`` (router bias,
top-k then softmax; clamped gated experts with interleaved gate/up and their biases), on one chip and with the experts
over two (the routed down biases added to each chip's slice of the fractured output). Rows of 40 tokens route to every
expert (asserted). PCC >= 0.9999 with bfloat16 experts, >= 0.999 with bfloat8_b."""

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


def _qwen3():
    hf = tiny_moe("qwen3-moe")
    block = hf.model.layers[0].mlp
    return block, ExpertArgs.from_hf(hf.config), lambda x: block(x)


def _gpt_oss():
    block = tiny_gpt_oss_block()
    return block, ExpertArgs.from_hf(GptOssConfig(**GPT_OSS_BLOCK)), lambda x: block(x)[0]


@pytest.mark.numerics
@pytest.mark.parametrize("chips", [1, 2])
@pytest.mark.parametrize("dtype, threshold", [(ttnn.bfloat16, 0.9999), (ttnn.bfloat8_b, 0.999)])
@pytest.mark.parametrize("family", ["qwen3-moe", "gpt-oss"])
def test_block_matches_hf(family, dtype, threshold, chips):
    block, experts, reference = {"qwen3-moe": _qwen3, "gpt-oss": _gpt_oss}[family]()
    x = torch.randn(1, TOKENS, block.experts.hidden_dim if family == "qwen3-moe" else block.experts.hidden_size,
                    generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(x)[0]
        router = block.gate if family == "qwen3-moe" else block.router
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


def test_experts_that_do_not_split_are_refused():
    block, experts, _ = _qwen3()
    mesh = open_device("host", mesh_shape=(1, 16))
    try:
        with pytest.raises(ValueError, match="8 experts of width 32 cannot split over 16 chips"):
            MoE({f"mlp.{k}": v for k, v in block.state_dict().items()}, "mlp.", experts, mesh, ttnn.bfloat16)
    finally:
        close_device(mesh)
