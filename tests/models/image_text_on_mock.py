"""Run Gemma 3's, Qwen2.5-VL's, Qwen3-VL's or Mistral 3's vision tower, prefill of an image row and one decode step on
a mock board (real ttnn validation), at the smallest dims that split over the board's chips: few layers, a tiny image.

``python -m tests.models.image_text_on_mock BOARD FAMILY:TT_DATA_PARALLEL:OPTIMIZATIONS...`` (FAMILY: ``gemma3``,
``qwen2.5-vl``, ``qwen3-vl`` or ``mistral3``; one board per process, see :mod:`tests.models.board_runs`). Prints one
``ok`` line per case with its output shapes.
"""

from typing import Any

import torch

from tests.models import board_runs
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.mistral3.generator import Mistral3ForConditionalGeneration
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.models.qwen3_vl.generator import Qwen3VLForConditionalGeneration
from tt_models.testing import gemma3, mistral3, qwen2_5_vl, qwen3_vl
from tt_models.testing.images import random_image

MAX_BATCH, BLOCK, NUM_BLOCKS, WIDTH = 2, 32, 4, 2
SHAPES = [(1, 1, gemma3.VOCAB), (MAX_BATCH, 1, gemma3.VOCAB)]  # prefill's and decode's logits (all vocabularies 512)
# Each chip of an n300 one tile of the hidden widths (64), one 32-wide head of each tower and the text (2 heads, one
# KV head: replicated on both chips); the vision MLPs 48 columns a chip (not whole tiles, as real towers' split).
TEXT = dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64)
# Gemma 3: one sliding and one global layer; an image of 2 crops (as pan-and-scan gives it: the tower runs them as one
# batch) of 32 px, 8 px patches pooled into 4 tokens each.
GEMMA3_TEXT = TEXT | dict(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])
GEMMA3_VISION = dict(hidden_size=64, num_hidden_layers=1, intermediate_size=96, image_size=32)
# Qwen2.5-VL: one window and one full-attention vision block; a 112 x 56 image (2 windows of 2 x 2 merge units).
QWEN_TEXT = TEXT | dict(num_hidden_layers=1)
QWEN_VISION = dict(depth=2, fullatt_block_indexes=[1], intermediate_size=96, out_hidden_size=64)
# Qwen3-VL: one text layer, two vision blocks (DeepStack taps the first); a 64 x 64 image (2 x 2 merged tokens).
QWEN3_TEXT = TEXT | dict(num_hidden_layers=1)
QWEN3_VISION = dict(depth=2, deepstack_visual_indexes=[0], intermediate_size=96)
# Mistral 3: one text layer (with its sliding window), one vision layer; an 84 x 56 image (3 x 2 merged tokens).
MISTRAL3_TEXT = TEXT | dict(num_hidden_layers=1)
MISTRAL3_VISION = dict(num_hidden_layers=1, intermediate_size=96)


def _gemma3() -> tuple[Any, Any, list[int], dict[str, Any]]:
    hf = gemma3.tiny_gemma3(**GEMMA3_VISION, text=GEMMA3_TEXT, tokens_per_image=4)
    processor = gemma3.image_processor(size=32)
    crops = processor(images=[random_image(40, 30, seed=i) for i in range(2)], return_tensors="pt")
    image = [gemma3.START_OF_IMAGE] + [gemma3.IMAGE_TOKEN] * 4 + [gemma3.END_OF_IMAGE]
    tokens = [5, 6] + image + image + [7]
    return hf, Gemma3ForConditionalGeneration, tokens, dict(pixel_values=[[crops["pixel_values"]]])


def _qwen2_5_vl() -> tuple[Any, Any, list[int], dict[str, Any]]:
    hf = qwen2_5_vl.tiny_qwen2_5_vl(**QWEN_VISION, text=QWEN_TEXT)
    pixel_values, grids = qwen2_5_vl.processed([random_image(112, 56, seed=0)])
    tokens = qwen2_5_vl.prompt([[5, 6], [7]], grids)
    return hf, Qwen2_5_VLForConditionalGeneration, tokens, dict(pixel_values=[pixel_values], image_grid_thw=[grids])


def _qwen3_vl() -> tuple[Any, Any, list[int], dict[str, Any]]:
    hf = qwen3_vl.tiny_qwen3_vl(**QWEN3_VISION, text=QWEN3_TEXT)
    pixel_values, grids = qwen3_vl.processed([random_image(64, 64, seed=0)])
    tokens = qwen3_vl.prompt([[5, 6], [7]], grids)
    return hf, Qwen3VLForConditionalGeneration, tokens, dict(pixel_values=[pixel_values], image_grid_thw=[grids])


def _mistral3() -> tuple[Any, Any, list[int], dict[str, Any]]:
    hf = mistral3.tiny_mistral3(**MISTRAL3_VISION, text=MISTRAL3_TEXT)
    pixel_values = mistral3.processed([random_image(84, 56, seed=0)])
    tokens = mistral3.prompt([[5, 6], [7]], pixel_values)
    return hf, Mistral3ForConditionalGeneration, tokens, dict(pixel_values=[pixel_values])


FAMILIES = {"gemma3": _gemma3, "qwen2.5-vl": _qwen2_5_vl, "qwen3-vl": _qwen3_vl, "mistral3": _mistral3}
MROPE = ("qwen2.5-vl", "qwen3-vl")  # prefill returns the rope deltas too


def run(device, family: str, data_parallel: int, optimizations: str) -> list[tuple[int, ...]]:
    """Prefill one image row into slot 0 and decode one step of the padded batch; the logits' shapes."""
    hf, generator_class, tokens, images = FAMILIES[family]()
    model = generator_class.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH, max_seq_len=WIDTH * BLOCK,
                                            tt_data_parallel=data_parallel, optimizations=optimizations)
    n_kv_heads, head_dim = model.models[0].kv_geometry
    kv = model.allocate_kv_cache((NUM_BLOCKS, n_kv_heads, BLOCK, head_dim), torch.bfloat16, model.models[0].n_layers)
    out = model.prefill_forward(tokens=torch.tensor([tokens]), page_table=torch.tensor([[2, 0]], dtype=torch.int32),
                                kv_cache=kv, prompt_lens=[len(tokens)], start_pos=[0], empty_slots=[0], **images)
    logits, deltas = out if family in MROPE else (out, [0])
    decoded = model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32), start_pos=torch.tensor([len(tokens), -1]),
        page_table=torch.tensor([[2, 0], [0, 0]], dtype=torch.int32), kv_cache=kv,
        rope_deltas_all_users=[int(deltas[0]), 0])  # (Gemma 3 and Mistral 3 take and ignore it, as any unknown keyword)
    return [tuple(logits.shape), tuple(decoded.shape)]


if __name__ == "__main__":
    board_runs.main(run)
