"""Tiny random HF mixture-of-experts models (Qwen3-MoE; GPT-OSS's expert block), to compare against.

HF initializes every weight with std 0.02, which leaves a tiny model's router logits within a few hundredths of each
other (routing decided by rounding) and its experts' outputs small beside the residual (a wrong expert would hardly
show in the logits). :func:`perturb_experts` widens both so routing is decisive and every expert counts.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, GptOssConfig, Qwen3MoeConfig

from tt_models.testing.llama import perturb

# 8 experts, top 2, hidden 64: layer 1 of 3 is a dense MLP (``mlp_only_layers``), the others sparse.
QWEN3_MOE = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], vocab_size=320,
                 max_position_embeddings=512)
TINY_CONFIGS = {
    "qwen3-moe": lambda: Qwen3MoeConfig(**QWEN3_MOE),
    # Qwen3-30B-A3B renormalizes its top-k weights; this one keeps the softmax's (``norm_topk_prob=False``), every
    # layer sparse.
    "qwen3-moe-unnormalized": lambda: Qwen3MoeConfig(**QWEN3_MOE | dict(norm_topk_prob=False, mlp_only_layers=[],
                                                                       num_hidden_layers=2)),
    # Wide enough for tensor-parallel attention over 8 chips (8 heads, hidden 256); 8 experts: one a chip on a T3K.
    "qwen3-moe-tp": lambda: Qwen3MoeConfig(**QWEN3_MOE | dict(hidden_size=256, intermediate_size=512,
                                                             num_attention_heads=8, num_hidden_layers=2,
                                                             mlp_only_layers=[])),
}
GPT_OSS_BLOCK = dict(hidden_size=64, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=320)


def perturb_experts(model: torch.nn.Module, router_std: float = 2.0) -> None:
    """Router logits about ``router_std`` apart for a unit-RMS input, expert weights at fan-in scale and their biases
    non-zero (GPT-OSS), on top of :func:`~tt_models.testing.llama.perturb`."""
    perturb(model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("mlp.gate.weight", "mlp.router.weight")):
                param.normal_(0, router_std / param.shape[-1] ** 0.5)
            elif name.endswith(("experts.gate_up_proj", "experts.down_proj")):  # [E, out, in]
                param.normal_(0, param.shape[-1] ** -0.5)


def tiny_moe(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = TINY_CONFIGS[name]()
    config.attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config).eval()
    perturb_experts(model)
    return model


def tiny_gpt_oss_block(seed: int = 0) -> torch.nn.Module:
    """GPT-OSS's MoE block (``GptOssMLP``: router with bias, experts with biases) of a tiny config."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    torch.manual_seed(seed)
    block = GptOssMLP(GptOssConfig(**GPT_OSS_BLOCK)).eval()
    with torch.no_grad():
        for name, param in block.named_parameters():
            if name == "router.weight":
                param.normal_(0, 2.0 / param.shape[-1] ** 0.5)
            elif name.endswith("bias"):
                param.normal_(0, 0.5)
            else:  # gate_up_proj [E, dim, 2I], down_proj [E, I, dim]: x @ W
                param.normal_(0, param.shape[-2] ** -0.5)
    return block
