"""Qwen3-VL against HF transformers (float32) on a tiny random config, host backend, both precision profiles.

The shared image+text tests (:mod:`tests.models.image_text_cases`: every teacher-forced prefill and decode step of a
one-image, a two-image (of different sizes) and a text-only request against HF's full forward over the sequence, i.e.
its interleaved M-RoPE positions (position + rope delta past the prompt) and DeepStack, PCC >= 0.99; the prefill's
deltas as HF's; free-running greedy against HF ``generate``); and Qwen3-VL's own: the vision tower's tokens and
DeepStack features for images of several sizes (the learned position grid resampled to each), the M-RoPE positions as
HF's, ablations showing DeepStack, the interleaved M-RoPE layout and the position resampling live, every step on
1 x 2 and 1 x 4 host meshes, and bad image inputs refused.
"""

from __future__ import annotations

import pytest
import torch

from tests.closeness import pcc
from tests.models import image_text_cases as shared
from tests.models.image_text_cases import PROFILES, ImageTextFamily, PluginBatch, generator
from tt_models.models.qwen2_5_vl.rope_index import mrope_positions
from tt_models.models.qwen3_vl import text, vision
from tt_models.models.qwen3_vl.generator import Qwen3VLForConditionalGeneration
from tt_models.models.qwen3_vl.vision import VisionArgs, VisionTower
from tt_models.runtime import host, use
from tt_models.testing import qwen3_vl
from tt_models.testing.qwen3_vl import IMAGE_TOKEN, prompt, tiny_qwen3_vl
from tt_models.tt.model_config import Precision


def rope_delta(hf, tokens: list[int], images: shared.Images) -> int:
    """HF's rope delta of an image prompt."""
    ids = torch.tensor([tokens])
    return int(hf.model.get_rope_index(ids, (ids == IMAGE_TOKEN).int(), torch.stack(images["image_grid_thw"]))[1])


FAMILY = ImageTextFamily(
    name="qwen3-vl", tiny=tiny_qwen3_vl, generator=Qwen3VLForConditionalGeneration,
    processed=lambda ims: dict(zip(("pixel_values", "image_grid_thw"), qwen3_vl.processed(ims))),
    prompt=lambda text_runs, images: prompt(text_runs, images["image_grid_thw"]),
    hf_inputs=lambda tokens, images: qwen3_vl.hf_inputs(tokens, images["pixel_values"], images["image_grid_thw"]),
    rope_delta=rope_delta,
    # (width, height): landscape (12 x 8 patches), portrait (4 x 12), the smallest (2 x 2).
    images=[(200, 120), (60, 180), (30, 30)], texts=[(5, 7), (3, 4, 6), (23,)], new_tokens=8,
    thresholds={"accuracy": 0.99, "performance": 0.99}, mock_text_len=20,
    # Both widths 128: the tower's 2 heads 64 wide, the text's 2 heads of 32 and its KV head as they are.
    four_chips=dict(hidden_size=128, out_hidden_size=128, text=dict(hidden_size=128)))
# The shared fixtures, and tests (below, in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
hf, images, cases, ours = shared.hf, shared.images, shared.cases, shared.ours


TOWER_THRESHOLD = 0.999  # the tower's tokens and DeepStack features against HF's, both profiles


def _tower_scores(hf, device, images, profile: str) -> list[list[float]]:
    """Per image: PCC of the merger's tokens and of each DeepStack merger's features against HF's."""
    with use(device):
        tower = VisionTower(VisionArgs.from_hf(hf.config.vision_config), hf.state_dict(), "model.visual.", device,
                            Precision.uniform(profile))
        scores = []
        for pixel_values, grid in zip(images["pixel_values"], images["image_grid_thw"]):
            with torch.no_grad():
                ref = hf.model.visual(pixel_values, grid_thw=grid[None])
            outs = tower.forward(pixel_values, tuple(grid.tolist()))
            scores.append([pcc(host.to_torch(o)[0, 0].float(), r)
                           for o, r in zip(outs, [ref.pooler_output, *ref.deepstack_features], strict=True)])
    return scores


def test_rope_index_matches_hf(hf, images):
    """Qwen2.5-VL's 3-D positions and delta are Qwen3-VL's for images (HF's ``get_rope_index``)."""
    grids = images["image_grid_thw"]
    tokens = prompt([[5, 6], [7], [8, 9, 10]], grids[:2])
    ids = torch.tensor([tokens])
    hf_positions, hf_delta = hf.model.get_rope_index(ids, (ids == IMAGE_TOKEN).int(), torch.stack(grids[:2]))
    positions, delta = mrope_positions(ids[0], grids[:2], IMAGE_TOKEN, hf.config.vision_config.spatial_merge_size)
    assert torch.equal(positions, hf_positions[:, 0]) and delta == int(hf_delta)


@pytest.mark.parametrize("profile", PROFILES)
def test_vision_tower_and_deepstack_match_hf(hf, images, host_device, profile):
    scores = _tower_scores(hf, host_device, images, profile)
    print(f"\nvision {profile}: PCC (tokens, DeepStack features...) {[[round(s, 5) for s in x] for x in scores]} "
          f"for grids {[g.tolist() for g in images['image_grid_thw']]}")
    assert min(min(x) for x in scores) >= TOWER_THRESHOLD


def _nearest_row(positions: torch.Tensor, grid: tuple[int, int, int], side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A plausible wrong resampling: each patch reads its nearest position row, whole."""
    taps, weights = INTERPOLATION_TAPS(positions, grid, side)
    nearest = taps[weights.argmax(0), torch.arange(taps.shape[1])]
    return nearest.expand(4, -1), torch.tensor([1.0, 0, 0, 0])[:, None].expand_as(weights)


INTERPOLATION_TAPS = vision.interpolation_taps


def test_position_resampling_is_live(hf, images, host_device, monkeypatch):
    """A tower that reads each patch's nearest learned position row instead of resampling the table falls below the
    tower's threshold."""
    monkeypatch.setattr(vision, "interpolation_taps", _nearest_row)
    score = min(_tower_scores(hf, host_device, {k: v[:1] for k, v in images.items()}, "accuracy")[0])
    print(f"\nnearest position rows: PCC {score:.5f}")
    assert score < TOWER_THRESHOLD


test_prefill_and_teacher_forced_decode_match_hf = shared.test_prefill_and_teacher_forced_decode_match_hf


def _contiguous_sections(section: list[int]) -> torch.Tensor:
    """A plausible wrong M-RoPE layout: Qwen2.5-VL's, one contiguous run of frequencies per axis."""
    return torch.repeat_interleave(torch.arange(3), torch.tensor(section))


# Each ablation: the module attribute it replaces and its wrong stand-in.
ABLATIONS = {"no DeepStack": ("add_image_rows", lambda x, rows, table, device: x),
             "contiguous M-RoPE sections": ("interleaved_axes", _contiguous_sections)}


@pytest.mark.parametrize("ablation", list(ABLATIONS))
def test_deepstack_and_interleaved_mrope_are_live(hf, cases, host_device, ablation, monkeypatch):
    """Qwen3-VL without DeepStack's features, or with Qwen2.5-VL's contiguous M-RoPE sections, leaves HF: the image
    rows' prefill logits fall below the threshold the real one passes (both act in prefill only: past the images
    the three positions are equal)."""
    monkeypatch.setattr(text, *ABLATIONS[ablation])
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    logits = PluginBatch(FAMILY, model, kv, cases[:2], slots=[0, 1]).prefill()
    scores = [pcc(row, c.reference[0]) for row, c in zip(logits, cases)]
    print(f"\n{ablation}: prefill PCC {[round(s, 5) for s in scores]} (one image, two images)")
    assert min(scores) < FAMILY.thresholds["accuracy"]


test_free_running_greedy_agrees_with_hf_generate = shared.test_free_running_greedy_agrees_with_hf_generate


test_mesh_matches_hf = shared.test_mesh_matches_hf


def test_bad_image_inputs_are_refused(hf, cases, host_device):
    """Patches that do not match their grid, and image tokens without grids, are refused with the problem named."""
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    case = cases[0]
    common = dict(tokens=torch.tensor([case.tokens]), page_table=torch.tensor([[3, 4, 5]], dtype=torch.int32),
                  kv_cache=kv, prompt_lens=[len(case.tokens)], start_pos=[0])
    (pixel_values,), (grid,) = case.images["pixel_values"], case.images["image_grid_thw"]
    with pytest.raises(ValueError, match=r"pixel_values \[96, 1535\] for grid \(1, 8, 12\): expected \[96, 1536\]"):
        model.prefill_forward(**common, pixel_values=[[pixel_values[:, 1:]]], image_grid_thw=[[grid]])
    with pytest.raises(ValueError, match="image tokens in the prompt but no image_grid_thw"):
        model.prefill_forward(**common, pixel_values=[None], image_grid_thw=[None])
