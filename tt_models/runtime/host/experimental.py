"""ttnn.experimental: paged KV-cache ops, attention head reshapes and rotary embedding."""

from .heads import nlp_concat_heads, nlp_concat_heads_decode, nlp_create_qkv_heads, nlp_create_qkv_heads_decode
from .paged_cache import paged_fill_cache, paged_fused_update_cache, paged_update_cache
from .rotary import rotary_embedding_llama

__all__ = [
    "paged_update_cache",
    "paged_fused_update_cache",
    "paged_fill_cache",
    "nlp_create_qkv_heads",
    "nlp_create_qkv_heads_decode",
    "nlp_concat_heads",
    "nlp_concat_heads_decode",
    "rotary_embedding_llama",
]
