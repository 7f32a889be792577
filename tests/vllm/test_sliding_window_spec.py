"""The KV-cache spec tt-models' sliding-window classes hand TT vLLM's plugin (``get_kv_cache_spec``), and that vLLM's
hybrid KV cache manager groups their layers as the classes do (``KVCacheGroups``: each group's page table reaches the
layers it names). vLLM 0.25.1 (the TT build) is imported here, as ``test_plugin_host.py`` imports it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from transformers import Gemma3TextConfig, MistralConfig

from tt_models.models.gemma3.generator import Gemma3ForCausalLM, Gemma3ForConditionalGeneration
from tt_models.models.llama.generator import LlamaForCausalLM, MistralForCausalLM
from tt_models.testing.gemma3 import tiny_gemma3


def _vllm_view(cls: type, hf_config: Any) -> dict | None:
    """The class's KV-cache spec as vLLM 0.25.1 reads it, and how vLLM's hybrid manager groups its layers."""
    from vllm.v1.core.kv_cache_utils import _get_kv_cache_groups_uniform_page_size

    text = getattr(hf_config, "text_config", hf_config)
    model_config = SimpleNamespace(hf_config=hf_config, dtype=torch.bfloat16, get_head_size=lambda: text.head_dim,
                                   get_num_kv_heads=lambda parallel: text.num_key_value_heads)
    vllm_config = SimpleNamespace(model_config=model_config, cache_config=SimpleNamespace(block_size=64),
                                  parallel_config=None)
    spec = cls.get_kv_cache_spec(vllm_config)
    if spec is None:
        return None
    kinds = [[type(s).__name__, getattr(s, "sliding_window", None), s.num_kv_heads, s.head_size, s.block_size]
             for s in spec.values()]
    groups = [[int(layer.split(".")[2]) for layer in g.layer_names]
              for g in _get_kv_cache_groups_uniform_page_size(spec)]
    return {"names": list(spec), "kinds": kinds, "groups": groups}


def _gemma3_4b_text() -> Gemma3TextConfig:
    """gemma-3-4b-it's text layout (34 layers, every 6th global, window 1024) at a small width."""
    return Gemma3TextConfig(num_hidden_layers=34, sliding_window=1024, hidden_size=64, intermediate_size=64,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=32, vocab_size=64)


def test_kv_cache_spec_and_vllm_groups():
    cases = [(Gemma3ForCausalLM, _gemma3_4b_text()), (Gemma3ForConditionalGeneration, tiny_gemma3().config),
             (MistralForCausalLM, MistralConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=2,
                                                num_key_value_heads=1, head_dim=32, sliding_window=256)),
             (LlamaForCausalLM, MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                              num_key_value_heads=1, head_dim=32, sliding_window=None))]
    results = [_vllm_view(cls, config) for cls, config in cases]
    for (cls, config), result in zip(cases, results):
        windows = cls.layer_windows(config)
        groups = cls.kv_cache_groups(config)
        if groups is None:  # no window: the plugin's own single full-attention spec
            assert result is None and set(windows) == {None}
            continue
        text = getattr(config, "text_config", config)
        assert result["names"] == [f"model.layers.{i}.self_attn" for i in range(text.num_hidden_layers)]
        assert result["kinds"] == [["FullAttentionSpec" if w is None else "SlidingWindowSpec", w,
                                    text.num_key_value_heads, text.head_dim, 64] for w in windows]
        assert result["groups"] == [list(layers) for layers in groups.layers]
    gemma = results[0]
    # gemma-3-4b: 5 global layers, 29 sliding ones in 6 groups of 5 (the last 4): 7 tables, 5 shared K/V pairs.
    assert [kind[0] for kind in gemma["kinds"]].count("FullAttentionSpec") == 5
    assert len(gemma["groups"]) == 7
    assert max(map(len, gemma["groups"])) == 5
