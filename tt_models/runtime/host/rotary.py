"""``ttnn.experimental.rotary_embedding_llama``: interleaved-pair (Meta) rotary embedding.

``out = x * cos + (x @ T) * sin``, with the 32x32 ``trans_mat`` T applied to every 32-column tile of x (the
tt_transformers matrix swaps each pair and negates the first: ``(x@T)[2k] = -x[2k+1]``). Using the given
matrix, rather than assuming it, keeps any caller-built T exact.
"""

from __future__ import annotations

from .errors import check
from .paged_cache import fp32_dest
from .tensor import Tensor
from .types import TILE_SIZE, DataType, Layout, MemoryConfig, TensorMemoryLayout, WormholeComputeKernelConfig

__all__ = ["rotary_embedding_llama"]


def rotary_embedding_llama(input_tensor: Tensor, cos_cache: Tensor, sin_cache: Tensor, trans_mat: Tensor, *,
                           is_decode_mode: bool = False, memory_config: MemoryConfig | None = None,
                           compute_kernel_config: WormholeComputeKernelConfig | None = None) -> Tensor:
    op = "rotary_embedding_llama"
    for name, t in (("input", input_tensor), ("cos", cos_cache), ("sin", sin_cache), ("trans_mat", trans_mat)):
        check(t.dtype == DataType.BFLOAT16, op, lambda: f"{name} must be BFLOAT16, got {t.dtype.name}")
        check(t.layout == Layout.TILE, op, f"{name} must be in TILE layout")
    dim = input_tensor.shape[-1]
    check(dim % TILE_SIZE == 0, op, f"head_dim {dim} must be a multiple of {TILE_SIZE}")
    check(dim <= 256, op, f"head_dim {dim} must be <= 256")
    check(dim <= 128 or not fp32_dest(compute_kernel_config), op,
          "head_dim > 128 needs fp32_dest_acc_en=False (the dest register holds too few tiles)")
    check(cos_cache.shape == sin_cache.shape, op, "cos and sin must have the same shape")
    check(cos_cache.shape[-1] == dim, op, lambda: f"cos/sin width {cos_cache.shape[-1]} must equal head_dim {dim}")
    check(trans_mat.shape[-1] == TILE_SIZE and trans_mat.shape[-2] % TILE_SIZE == 0, op,
          lambda: f"trans_mat must be [.., 32k, 32], got {list(trans_mat.shape)}")
    x = input_tensor.value
    if is_decode_mode:
        # x [1, B, heads, D]; cos/sin [1, B, rows, D]: the kernel broadcasts each user's first row over its heads.
        check(len(x.shape) == 4 and x.shape[0] == 1, op,
              lambda: f"decode input must be [1, B, heads, D], got {list(x.shape)}")
        for name, t in (("input", input_tensor), ("cos", cos_cache), ("sin", sin_cache)):
            check(t.is_sharded() and t.memory_config().memory_layout == TensorMemoryLayout.HEIGHT_SHARDED, op,
                  f"decode mode needs a height-sharded {name}")
        check(cos_cache.shape[1] == x.shape[1], op,
              lambda: f"cos batch {cos_cache.shape[1]} must equal the input batch {x.shape[1]}")
        cos, sin = cos_cache.value[:, :, :1, :], sin_cache.value[:, :, :1, :]
    else:
        check(not input_tensor.is_sharded(), op, "prefill mode needs an interleaved input")
        check(cos_cache.shape[-2] == x.shape[-2], op,
              lambda: f"cos/sin seq_len {cos_cache.shape[-2]} must equal the input seq_len {x.shape[-2]}")
        check(cos_cache.shape[1] in (1, x.shape[1]), op,
              lambda: f"cos heads {cos_cache.shape[1]} must be 1 or {x.shape[1]}")
        cos, sin = cos_cache.value, sin_cache.value
    t = trans_mat.value.reshape(-1, TILE_SIZE, TILE_SIZE)[0]
    rotated = (x.reshape(*x.shape[:-1], dim // TILE_SIZE, TILE_SIZE) @ t).reshape(x.shape)
    out = x * cos + rotated * sin
    return input_tensor.like(out, memory_config=memory_config or input_tensor.memory_config())
