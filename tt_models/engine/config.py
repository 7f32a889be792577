"""The engine's configuration and the sizes it derives from the model's HF config."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from transformers import PretrainedConfig

from tt_models.models.mllama.vision import VisionArgs

HOST_KV_CACHE_BYTES = 2**30  # the default pool's cap on the host backend, whose KV lives in host memory
_BYTES_PER_KV_ELEMENT = 2  # bfloat16 on the device: the pool is sized as the device holds it


@dataclass(frozen=True)
class KVShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int

    def block_bytes(self, block_size: int) -> int:
        """K and V of one block in every layer."""
        return 2 * self.num_layers * self.num_kv_heads * block_size * self.head_dim * _BYTES_PER_KV_ELEMENT

    def per_chip(self, chips: int) -> "KVShape":
        """One chip's share on a tensor-parallel replica of ``chips`` chips, as TT vLLM computes it:
        ``kv_heads // min(chips, kv_heads)`` heads (KV heads replicated when there are fewer than chips)."""
        return KVShape(self.num_layers, self.num_kv_heads // min(chips, self.num_kv_heads), self.head_dim)


# Image tokens in the prompt, the vision tower's output in their rows.
PROMPT_IMAGE_MODELS = frozenset({"qwen2_5_vl", "qwen3_vl", "gemma3", "mistral3"})


def has_prompt_images(hf_config: PretrainedConfig) -> bool:
    """Images whose tokens sit in the prompt, expanded from one placeholder per image (Qwen2.5-VL, Qwen3-VL,
    Gemma 3, Mistral 3)."""
    return getattr(hf_config, "model_type", None) in PROMPT_IMAGE_MODELS


def uses_mrope(hf_config: PretrainedConfig) -> bool:
    """M-RoPE (Qwen2.5-VL, Qwen3-VL; vLLM's test, ``mrope_section`` in the rope parameters): prefill returns each row's
    position delta, which its decode steps take back."""
    return "mrope_section" in (getattr(decoder_config(hf_config), "rope_parameters", None) or {})


def is_image_text(hf_config: PretrainedConfig) -> bool:
    """A vision encoder feeding a text decoder's cross-attention (Llama 3.2 Vision)."""
    return (getattr(hf_config, "vision_config", None) is not None and hasattr(hf_config, "text_config")
            and not has_prompt_images(hf_config))


def takes_images(hf_config: PretrainedConfig) -> bool:
    """Image prompts of either kind."""
    return is_image_text(hf_config) or has_prompt_images(hf_config)


def uses_cross_attention(hf_config: PretrainedConfig) -> bool:
    """Whether requests may hold cross blocks: encoder-decoder models, and image+text models (image requests)."""
    return bool(getattr(hf_config, "is_encoder_decoder", False)) or is_image_text(hf_config)


def decoder_config(hf_config: PretrainedConfig) -> PretrainedConfig:
    """The config of the model that generates: an image+text model's text model."""
    return hf_config.text_config if takes_images(hf_config) else hf_config


def max_encoder_len(hf_config: PretrainedConfig) -> int:
    """Cross-attention positions of one request at most (0: decoder-only)."""
    if is_image_text(hf_config):  # the generator's max_cross_attn_tokens, known before it is built
        return VisionArgs.from_hf(hf_config.vision_config).vision_tokens
    if not getattr(hf_config, "is_encoder_decoder", False):
        return 0
    if hf_config.model_type == "whisper":
        return hf_config.max_source_positions
    return hf_config.max_position_embeddings


def kv_shape(hf_config: PretrainedConfig) -> KVShape:
    """Decoder self-attention K/V geometry (cross blocks have the same shape: one pool holds both)."""
    hf_config = decoder_config(hf_config)
    if getattr(hf_config, "is_encoder_decoder", False):
        heads = hf_config.decoder_attention_heads
        return KVShape(hf_config.decoder_layers, heads, hf_config.d_model // heads)
    heads = hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return KVShape(hf_config.num_hidden_layers, getattr(hf_config, "num_key_value_heads", None) or heads, head_dim)


def model_max_len(hf_config: PretrainedConfig) -> int:
    """The decoder's own context limit."""
    hf_config = decoder_config(hf_config)
    if hf_config.model_type == "whisper":
        return hf_config.max_target_positions
    return hf_config.max_position_embeddings


@dataclass(frozen=True)
class EngineConfig:
    """What ``LLM(...)`` takes beyond the model, resolved against the model (see :meth:`resolve`).

    ``max_num_batched_tokens`` is the prefill token budget per step: with chunked prefill a prompt longer
    than what is left of it runs in chunks over several steps; without, a prompt runs whole and the budget
    must hold the longest one. ``preemption_mode`` None is vLLM v0's rule: recompute a request with one
    sequence, swap one with several (falling back to recomputation when host blocks run out).

    ``data_parallel_size`` replicas of the model (one per submesh) share ``max_num_seqs`` batch slots equally; the
    KV sizes (``num_kv_blocks``, ``num_host_kv_blocks``) are per replica: each has its own pools. Without
    ``num_kv_blocks`` the pool holds every slot's request at full length, or as many blocks as fit in a chip's
    memory after its weights (:meth:`with_kv_pool`, once the model is built).
    ``async_decode``: issue each decode step before detokenizing the previous one's tokens (see
    ``LLMEngine.step``): the same outputs, the host's per-token work hidden behind the device's; sampled on the
    device by a model that feeds its tokens back (``supports_async_decode``), before reading them too.
    ``sample_on_device``: decode steps whose sequences are all plain greedy sample on the device (the model's
    ``supports_sample_on_device``): the device hands back 32 tokens instead of ``[32, V]`` logits.
    ``enable_prefix_caching``: a prompt starting with the tokens of cached full blocks takes their K/V instead of
    computing it (vLLM's automatic prefix caching, on by default as there; ``tt_models.engine.prefix_cache``); off
    for a model that does not declare ``supports_prefix_caching`` (as under TT vLLM), where the model has
    sliding-window layers kept apart, and with ``preemption_mode="swap"``.
    ``free_out_of_window_blocks``: a model with sliding-window layers keeps a block table per KV-cache group, its
    sliding layers' holding only their window (as vLLM's hybrid KV cache manager; ``docs/engine.md``); off, every
    layer keeps every block of its request.
    """

    max_num_seqs: int = 32
    max_model_len: int | None = None
    block_size: int = 64
    num_kv_blocks: int | None = None
    num_host_kv_blocks: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool = True
    preemption_mode: Literal["recompute", "swap"] | None = None
    max_num_waiting: int | None = None
    data_parallel_size: int = 1
    async_decode: bool = False
    sample_on_device: bool = False
    free_out_of_window_blocks: bool = True
    enable_prefix_caching: bool = True

    def resolve(self, hf_config: PretrainedConfig, max_encoder_len: int) -> EngineConfig:
        """Fill in the defaults and check the values against the model; raises ValueError naming the problem."""
        limit = model_max_len(hf_config)
        max_model_len = self.max_model_len or limit
        if not 1 < max_model_len <= limit:
            raise ValueError(f"max_model_len {max_model_len} must be in 2..{limit} (the model's context)")
        replicas = self.data_parallel_size
        if replicas < 1 or self.max_num_seqs % replicas:
            raise ValueError(f"data_parallel_size {replicas} must be >= 1 and divide max_num_seqs "
                             f"{self.max_num_seqs}")
        if not 1 <= self.max_num_seqs // replicas <= 32:
            raise ValueError(f"max_num_seqs {self.max_num_seqs} must be in 1..{32 * replicas}: decode runs one "
                             "32-row tile of users per replica")
        if self.block_size < 32 or self.block_size % 32:
            raise ValueError(f"block_size {self.block_size} must be a positive multiple of 32 (one tile)")
        if self.preemption_mode not in (None, "recompute", "swap"):
            raise ValueError(f"preemption_mode must be 'recompute', 'swap' or None, got {self.preemption_mode!r}")
        num_kv_blocks, one_request = self.num_kv_blocks, self.blocks_per_request(max_model_len, max_encoder_len)
        if num_kv_blocks is not None and num_kv_blocks < one_request:
            raise ValueError(f"num_kv_blocks {num_kv_blocks} cannot hold one request at max_model_len "
                             f"{max_model_len} (needs {one_request} blocks of {self.block_size}); lower "
                             "max_model_len or raise num_kv_blocks")
        budget = self.max_num_batched_tokens
        if budget is None:
            budget = 2048 if self.enable_chunked_prefill else max(max_model_len, 2048)
        if budget < 1 or (not self.enable_chunked_prefill and budget < max_model_len):
            raise ValueError(f"max_num_batched_tokens {budget} must be >= 1, and >= max_model_len "
                             f"({max_model_len}) without chunked prefill")
        return EngineConfig(
            max_num_seqs=self.max_num_seqs, max_model_len=max_model_len, block_size=self.block_size,
            num_kv_blocks=num_kv_blocks,
            num_host_kv_blocks=num_kv_blocks if self.num_host_kv_blocks is None else self.num_host_kv_blocks,
            max_num_batched_tokens=budget, enable_chunked_prefill=self.enable_chunked_prefill,
            preemption_mode=self.preemption_mode, max_num_waiting=self.max_num_waiting, data_parallel_size=replicas,
            async_decode=self.async_decode, sample_on_device=self.sample_on_device,
            free_out_of_window_blocks=self.free_out_of_window_blocks, enable_prefix_caching=self.enable_prefix_caching)

    def blocks_per_request(self, max_model_len: int, max_encoder_len: int) -> int:
        """Blocks of one request at full length: its self blocks and its cross blocks."""
        return -(-max_model_len // self.block_size) + -(-max_encoder_len // self.block_size)

    def with_kv_pool(self, blocks_that_fit: int, max_encoder_len: int) -> EngineConfig:
        """The resolved config with its default KV pool: enough blocks for every slot's request at full length, but
        no more than ``blocks_that_fit`` (the memory left), and at least one request's."""
        if self.num_kv_blocks is not None:
            return self
        one_request = self.blocks_per_request(self.max_model_len, max_encoder_len)
        blocks = max(one_request, min(self.max_num_seqs // self.data_parallel_size * one_request, blocks_that_fit))
        return replace(self, num_kv_blocks=blocks,
                       num_host_kv_blocks=blocks if self.num_host_kv_blocks is None else self.num_host_kv_blocks)
