"""Tiny random HF mixture-of-experts models (Qwen3-MoE, GPT-OSS; GPT-OSS's expert block alone), to compare against.

HF initializes every weight with std 0.02, which leaves a tiny model's router logits within a few hundredths of each
other (routing decided by rounding) and its experts' outputs small beside the residual (a wrong expert would hardly
show in the logits). :func:`perturb_experts` widens both so routing is decisive and every expert counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GptOssConfig, Qwen3MoeConfig

from tt_models.testing.llama import perturb

# 8 experts, top 2, hidden 64: layer 1 of 3 is a dense MLP (``mlp_only_layers``), the others sparse.
QWEN3_MOE = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], vocab_size=320,
                 max_position_embeddings=512)
GPT_OSS = dict(hidden_size=64, intermediate_size=64, num_local_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=320, max_position_embeddings=128,
               sliding_window=16, layer_types=["sliding_attention", "full_attention"],
               rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0, beta_fast=32.0, beta_slow=1.0,
                                    truncate=False, original_max_position_embeddings=32))
# GPT-OSS's router logits further apart: its tiny model's routing is otherwise near a tie at a third of the tokens.
GPT_OSS_ROUTER_STD = 5.0
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
    # GPT-OSS: every layer sparse; a sliding (window 16) and a full layer; YaRN from 32 positions (factor 4), so the
    # tests' 70-token sequences reach past both the window and the original context.
    "gpt-oss": lambda: GptOssConfig(**GPT_OSS),
    # Wide enough for tensor-parallel attention over 8 chips, 8 experts: one a chip on a T3K (experts 256 wide: the
    # decode layouts split ``intermediate_size`` as a dense MLP's).
    "gpt-oss-tp": lambda: GptOssConfig(**GPT_OSS | dict(hidden_size=256, intermediate_size=256,
                                                        num_attention_heads=8)),
    # A hidden size that, as the real models' 2880 (90 tiles) on 4 or 8 chips, does not split into whole tiles per
    # chip: 160 (5 tiles), zero-padded to 256 on 4 and 8 chips (tt_models.tt.hidden_padding); experts 64 wide, like
    # 2880 not whole tiles per chip over 4 (16 columns) or 8.
    "gpt-oss-padded": lambda: GptOssConfig(**GPT_OSS | dict(hidden_size=160, num_attention_heads=8)),
    # GPT-OSS-20B's attention geometry (64 query heads over 8 KV heads of 64) on one chip: more query heads than one
    # tile of rows in decode.
    "gpt-oss-64-heads": lambda: GptOssConfig(**GPT_OSS | dict(num_attention_heads=64, num_key_value_heads=8,
                                                              head_dim=64)),
}
GPT_OSS_BLOCK = dict(hidden_size=64, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=320)


def perturb_experts(model: torch.nn.Module, router_std: float = 2.0) -> None:
    """Router logits about ``router_std`` apart for a unit-RMS input, expert weights at fan-in scale, their biases
    (GPT-OSS, by :func:`~tt_models.testing.llama.perturb`) non-zero.

    GPT-OSS's attention too is made to count (its projections at fan-in scale, attention logits of about unit spread,
    sinks about as large), so that its sinks, windows and rotary scaling show in the logits; its token embeddings are
    unit-scale and the biases added to every token's residual (output projection, experts' down projection) small,
    or that common part would route every token alike."""
    perturb(model)
    gpt_oss = model.config.model_type == "gpt_oss"
    fan_in = -2 if gpt_oss else -1  # GPT-OSS's experts are [E, in, out]: x @ W
    with torch.no_grad():
        for name, param in model.named_parameters():
            if gpt_oss and name.endswith("embed_tokens.weight"):
                param.normal_(0, 1.0)
            elif gpt_oss and name.endswith(("o_proj.bias", "down_proj_bias")):
                param.normal_(0, 0.1)
            elif name.endswith(("mlp.gate.weight", "mlp.router.weight")):
                param.normal_(0, router_std / param.shape[-1] ** 0.5)
            elif name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                param.normal_(0, param.shape[fan_in] ** -0.5)
            elif gpt_oss and name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")):
                param.normal_(0, param.shape[-1] ** -0.5)
            elif name.endswith("self_attn.sinks"):
                param.normal_(0, 1.0)


def tiny_moe(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = TINY_CONFIGS[name]()
    config.attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config).eval()
    perturb_experts(model, GPT_OSS_ROUTER_STD if config.model_type == "gpt_oss" else 2.0)
    return model


def tiny_gpt_oss_block(seed: int = 0, **config: float) -> torch.nn.Module:
    """GPT-OSS's MoE block (``GptOssMLP``: router with bias, experts with biases) of a tiny config (``config``
    overriding :data:`GPT_OSS_BLOCK`, e.g. ``swiglu_limit``)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    torch.manual_seed(seed)
    block = GptOssMLP(GptOssConfig(**GPT_OSS_BLOCK | config)).eval()
    with torch.no_grad():
        for name, param in block.named_parameters():
            if name == "router.weight":
                param.normal_(0, 2.0 / param.shape[-1] ** 0.5)
            elif name.endswith("bias"):
                param.normal_(0, 0.5)
            else:  # gate_up_proj [E, dim, 2I], down_proj [E, I, dim]: x @ W
                param.normal_(0, param.shape[-2] ** -0.5)
    return block


def save_mxfp4(model: torch.nn.Module, directory: Path) -> None:
    """Save a GPT-OSS model as OpenAI's checkpoints are: each expert projection as MXFP4 (OCP Microscaling: blocks of
    32 consecutive input features share a power-of-two scale, each value an FP4 E2M1 code, two codes a byte, low
    nibble first) in ``*_blocks`` ``[E, out, in / 32, 16]`` and ``*_scales`` ``[E, out, in / 32]`` (biased exponents),
    and ``quantization_config`` ``{"quant_method": "mxfp4"}`` in the config."""
    from safetensors.torch import load_file, save_file

    model.save_pretrained(directory)
    path = directory / "model.safetensors"
    state = load_file(path)
    for name in [n for n in state if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        state[f"{name}_blocks"], state[f"{name}_scales"] = _mxfp4(state.pop(name).transpose(1, 2))
    save_file(state, path, metadata={"format": "pt"})
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": None}
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def _mxfp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight [.., in]`` as MXFP4 blocks and scales: each block's scale ``2^(floor(log2(amax)) - 2)`` (E2M1's
    largest exponent), its values rounded to the nearest code, those past 6 clamped."""
    from transformers.integrations.mxfp4 import FP4_VALUES

    groups = weight.float().reshape(*weight.shape[:-1], -1, 32)
    amax = groups.abs().amax(dim=-1, keepdim=True).clamp(min=2.0 ** -126)
    exponent = torch.floor(torch.log2(amax)) - 2
    values = torch.tensor(FP4_VALUES)
    codes = ((groups / torch.exp2(exponent))[..., None] - values).abs().argmin(dim=-1).to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks, (exponent[..., 0] + 127).to(torch.uint8)
