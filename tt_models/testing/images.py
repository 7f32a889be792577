"""Random test images: pixels of a seeded generator, so every run and process sees the same picture."""

from __future__ import annotations

import numpy as np
from PIL import Image


def random_image(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
