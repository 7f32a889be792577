"""A tiny random HF Qwen2.5-VL, its image processor (PIL backend, small pixel budget) and HF's own inputs for it."""

from __future__ import annotations

import torch
from PIL import Image
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

VOCAB = 512
IMAGE_TOKEN, VISION_START, VISION_END = 500, 498, 499
# Windows of 56 px = 2 x 2 merge units (4 x 4 patches): every test image spans several, so window attention is live
# in blocks 0 and 2; blocks 1 and 3 attend the whole image.
VISION = dict(depth=4, hidden_size=64, num_heads=2, intermediate_size=128, fullatt_block_indexes=[1, 3], window_size=56,
              spatial_merge_size=2, patch_size=14, temporal_patch_size=2, out_hidden_size=128, in_channels=3,
              initializer_range=64 ** -0.5)
# head_dim 32: the M-RoPE sections (temporal, height, width) split its 16 frequencies. Both towers' weights are drawn
# with std hidden ** -0.5 (variance-preserving, so each branch is O(1) beside the residual as in a trained checkpoint):
# under HF's 0.02 the merger's biases dominate the vision output and the PCC would not see a wrong window mask.
TEXT = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=3, intermediate_size=256,
            vocab_size=VOCAB, max_position_embeddings=1024, rms_norm_eps=1e-6, initializer_range=128 ** -0.5,
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
            rope_parameters={"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0})
# Pixel budget: images come out between 4 x 4 and 16 x 16 patches (4 to 64 tokens).
MIN_PIXELS, MAX_PIXELS = 56 * 56, 224 * 224


def tiny_qwen2_5_vl(seed: int = 0, *, text: dict | None = None, **vision: int) -> Qwen2_5_VLForConditionalGeneration:
    """Random weights (biases drawn too: HF initializes them to zero, which would hide them). ``text``, ``vision``:
    overrides of ``TEXT`` and ``VISION``."""
    torch.manual_seed(seed)
    config = Qwen2_5_VLConfig(vision_config=VISION | vision, text_config=TEXT | (text or {}),
                              image_token_id=IMAGE_TOKEN, video_token_id=501, vision_start_token_id=VISION_START,
                              vision_end_token_id=VISION_END, architectures=["Qwen2_5_VLForConditionalGeneration"])
    config._attn_implementation = "eager"
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.3)
    return model


def image_processor() -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=VISION["patch_size"],
                                    temporal_patch_size=VISION["temporal_patch_size"],
                                    merge_size=VISION["spatial_merge_size"])


def processed(images: list[Image.Image]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each image's flat patches ``[t * h * w, 1176]`` and grid ``[3]``, as vLLM's processor hands them per item."""
    out = image_processor()(images=images, return_tensors="pt")
    grids = list(out["image_grid_thw"])
    return list(out["pixel_values"].split([int(g.prod()) for g in grids])), grids


def prompt(text: list[list[int]], grids: list[torch.Tensor]) -> list[int]:
    """``text[0] <vision_start> image 0 <vision_end> text[1] ...``: each image's expanded placeholder tokens."""
    out = list(text[0])
    for grid, after in zip(grids, text[1:]):
        out += [VISION_START] + [IMAGE_TOKEN] * (int(grid.prod()) // VISION["spatial_merge_size"] ** 2)
        out += [VISION_END] + list(after)
    return out


def hf_inputs(tokens: list[int], pixel_values: list[torch.Tensor], grids: list[torch.Tensor]) -> dict:
    """HF forward/generate inputs for one prompt (no images: text only)."""
    ids = torch.tensor([tokens])
    inputs = dict(input_ids=ids, mm_token_type_ids=(ids == IMAGE_TOKEN).int())
    if pixel_values:
        inputs.update(pixel_values=torch.cat(pixel_values), image_grid_thw=torch.stack(grids))
    return inputs
