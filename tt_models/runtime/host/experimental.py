"""ttnn.experimental: paged KV-cache ops, attention head reshapes and rotary embedding."""
