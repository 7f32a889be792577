"""The pre-norm residual of transformer blocks: ``x + sublayer(norm(x))``."""

from __future__ import annotations

from typing import Any, Callable

from tt_models.runtime import ttnn


def pre_norm_residual(x: Any, norm: Any, sublayer: Callable[[Any], Any]) -> Any:
    """``x + sublayer(norm.forward(x))``; the intermediates are freed, ``x`` is kept."""
    normed = norm.forward(x)
    y = sublayer(normed)
    ttnn.deallocate(normed)
    out = ttnn.add(x, y)
    ttnn.deallocate(y)
    return out
