"""One replica of a decoder-only image+text model (Gemma 3, Qwen2.5-VL): a vision tower that turns each image into
tokens of the text width, and ``text``, the decoder those tokens are placed into, whose layers, precision and KV
geometry the contract sees."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from tt_models.runtime import ttnn


class ImageTextModel(ABC):
    def __init__(self, text: Any) -> None:
        """``text``: the decoder (``prefill``, ``decode_inputs``, ``decode_device``, ``n_layers``, ``precision``,
        ``vocab_size``, ``kv_geometry``)."""
        self.text = text
        self.n_layers = text.n_layers
        self.precision = text.precision

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size

    @property
    def kv_geometry(self) -> tuple[int, int]:
        return self.text.kv_geometry

    @abstractmethod
    def image_tokens(self, *image: Any) -> Any:
        """One image (as the family's processor gives it) -> its tokens ``[1, 1, tokens, text dim]`` on the device,
        whole on every chip."""

    @abstractmethod
    def blank_image(self) -> tuple[Any, ...]:
        """The arguments of :meth:`image_tokens` for the smallest blank image (warm-up compiles the tower on it)."""

    def image_table(self, *per_image: Sequence[Any]) -> Any:
        """The tokens of a request's images, one after the other: ``[1, 1, image tokens, text dim]``. ``per_image``:
        one sequence per argument of :meth:`image_tokens`, an entry per image."""
        return concat_tokens([self.image_tokens(*image) for image in zip(*per_image)])


def concat_tokens(parts: list[Any], dim: int = 2) -> Any:
    """Image tokens ``[1, 1, n_i, d]`` one after the other ``[1, 1, sum n_i, d]`` (``dim=3``: rows ``[1, 1, n, d_i]``
    side by side ``[1, 1, n, sum d_i]``); the parts are freed."""
    if len(parts) == 1:
        return parts[0]
    table = ttnn.concat(parts, dim=dim)
    for part in parts:
        ttnn.deallocate(part)
    return table
