"""ttnn.transformer: scaled dot-product attention (prefill, chunked, decode, paged decode)."""

from .attention import chunked_scaled_dot_product_attention, scaled_dot_product_attention
from .decode_attention import paged_scaled_dot_product_attention_decode, scaled_dot_product_attention_decode

__all__ = [
    "scaled_dot_product_attention",
    "chunked_scaled_dot_product_attention",
    "scaled_dot_product_attention_decode",
    "paged_scaled_dot_product_attention_decode",
]
