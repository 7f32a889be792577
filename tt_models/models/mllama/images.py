"""Image preprocessing with HF's ``MllamaImageProcessor`` (its pillow backend), one image per request."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil


@dataclass(frozen=True)
class ImageInput:
    """One image as the vision encoder takes it."""

    pixel_values: torch.Tensor  # [max_num_tiles, C, H, W]
    aspect_ratio_id: int  # 1-based index into the supported tile layouts
    num_tiles: int  # real tiles (the rest are padding)


def image_processor(checkpoint: str | Path | None, vision_config: Any) -> MllamaImageProcessorPil:
    """The checkpoint's ``preprocessor_config.json`` if it has one, else the processor its vision config implies."""
    if checkpoint is not None and (Path(checkpoint) / "preprocessor_config.json").is_file():
        return MllamaImageProcessorPil.from_pretrained(checkpoint, local_files_only=True)
    size = vision_config.image_size
    return MllamaImageProcessorPil(size={"height": size, "width": size}, max_image_tiles=vision_config.max_num_tiles)


def preprocess(processor: MllamaImageProcessorPil, image: Any) -> ImageInput:
    if not isinstance(image, Image.Image):
        raise TypeError(f"images must be PIL.Image.Image, got {type(image).__name__}")
    out = processor(images=[[image.convert("RGB")]], return_tensors="pt")
    return ImageInput(out["pixel_values"][0, 0], int(out["aspect_ratio_ids"][0, 0]), int(out["num_tiles"][0][0]))
