"""ttnn.transformer: scaled dot-product attention (prefill, chunked, decode, paged decode)."""
