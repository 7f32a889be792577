"""Qwen2.5-VL against HF transformers (float32) on a tiny random config, host backend, both precision profiles.

The shared image+text tests (:mod:`tests.models.image_text_cases`: every teacher-forced prefill and decode step of a
one-image, a two-image and a text-only request against HF's full forward over the sequence, i.e. its M-RoPE positions
(position + rope delta past the prompt), PCC >= 0.99, on one chip, 1 x 2 and 1 x 4 host meshes; the prefill's deltas
as HF's; free-running greedy against HF ``generate``); and Qwen's own: the vision tower's output for images of several
sizes and aspect ratios (window attention live), its window layout and the M-RoPE positions as HF's, the per-slot
deltas following ``slot_remap``.
"""

from __future__ import annotations

import pytest
import torch
from transformers.vision_utils import get_vision_window_index

from tests.closeness import pcc
from tests.models import image_text_cases as shared
from tests.models.image_text_cases import PROFILES, ImageTextFamily, PluginBatch, generator
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.models.qwen2_5_vl.rope_index import mrope_positions
from tt_models.models.qwen2_5_vl.vision import VisionArgs, VisionTower
from tt_models.runtime import host, use
from tt_models.testing import qwen2_5_vl
from tt_models.testing.qwen2_5_vl import IMAGE_TOKEN, prompt, tiny_qwen2_5_vl
from tt_models.tt.model_config import Precision


def rope_delta(hf, tokens: list[int], images: shared.Images) -> int:
    """HF's rope delta of an image prompt."""
    ids = torch.tensor([tokens])
    return int(hf.model.get_rope_index(ids, (ids == IMAGE_TOKEN).int(), torch.stack(images["image_grid_thw"]))[1])


FAMILY = ImageTextFamily(
    name="qwen2.5-vl", tiny=tiny_qwen2_5_vl, generator=Qwen2_5_VLForConditionalGeneration,
    processed=lambda ims: dict(zip(("pixel_values", "image_grid_thw"), qwen2_5_vl.processed(ims))),
    prompt=lambda text, images: prompt(text, images["image_grid_thw"]),
    hf_inputs=lambda tokens, images: qwen2_5_vl.hf_inputs(tokens, images["pixel_values"], images["image_grid_thw"]),
    rope_delta=rope_delta,
    # (width, height): landscape (8 x 14 patches), portrait (12 x 4), the smallest (4 x 4), square (10 x 10).
    images=[(200, 120), (60, 180), (56, 56), (140, 140)], texts=[(5, 7), (3, 4, 6), (23,)], new_tokens=10,
    thresholds={"accuracy": 0.99, "performance": 0.99}, mock_text_len=20,
    four_chips=dict(hidden_size=128))  # the tower's 2 heads of 64 (the text's 128 splits as it is)
# The shared fixtures, and tests (below, in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
hf, images, cases, ours = shared.hf, shared.images, shared.cases, shared.ours


def test_window_layout_and_rope_index_match_hf(hf, images, host_device):
    """The host-side bookkeeping: window order and windows as HF's ``get_vision_window_index``, 3-D positions and
    deltas as HF's ``get_rope_index``."""
    vision = hf.config.vision_config
    with use(host_device):
        tower = VisionTower(VisionArgs.from_hf(vision), hf.state_dict(), "model.visual.", host_device,
                            Precision.uniform("accuracy"))
    grids = images["image_grid_thw"]
    for grid in grids:
        layout = tower.layout(tuple(grid.tolist()))
        window_index, cu_windows = get_vision_window_index(grid[None], vision.spatial_merge_size, vision.window_size,
                                                           vision.patch_size)
        assert torch.equal(layout.unit_order, window_index)
        sizes = torch.bincount(layout.window)
        assert torch.equal(torch.cumsum(sizes[sizes > 0], 0), cu_windows[1:].long())
        one_window = max(grid[1:]) <= vision.window_size // vision.patch_size  # the smallest image: no mask needed
        assert (layout.mask(layout.window) is None) == one_window
    tokens = prompt([[5, 6], [7], [8, 9, 10]], grids[:2])
    ids = torch.tensor([tokens])
    hf_positions, hf_delta = hf.model.get_rope_index(ids, (ids == IMAGE_TOKEN).int(), torch.stack(grids[:2]))
    positions, delta = mrope_positions(torch.tensor(tokens), grids[:2], IMAGE_TOKEN, vision.spatial_merge_size)
    assert torch.equal(positions, hf_positions[:, 0]) and delta == int(hf_delta)


@pytest.mark.parametrize("profile", PROFILES)
def test_vision_tower_matches_hf(hf, images, host_device, profile):
    with use(host_device):
        tower = VisionTower(VisionArgs.from_hf(hf.config.vision_config), hf.state_dict(), "model.visual.", host_device,
                            Precision.uniform(profile))
        scores = []
        for pixel_values, grid in zip(images["pixel_values"], images["image_grid_thw"]):
            with torch.no_grad():
                ref = hf.model.visual(pixel_values, grid_thw=grid[None]).pooler_output
            ours = host.to_torch(tower.forward(pixel_values, tuple(grid.tolist())))[0, 0].float()
            scores.append(pcc(ours, ref))
    print(f"\nvision {profile}: PCC {[round(s, 5) for s in scores]} for grids "
          f"{[g.tolist() for g in images['image_grid_thw']]}")
    assert min(scores) >= FAMILY.thresholds[profile]


test_prefill_and_teacher_forced_decode_match_hf = shared.test_prefill_and_teacher_forced_decode_match_hf
test_free_running_greedy_agrees_with_hf_generate = shared.test_free_running_greedy_agrees_with_hf_generate
test_mesh_matches_hf = shared.test_mesh_matches_hf


@pytest.mark.parametrize("remap", [True, False], ids=["slot_remap", "remap_ignored"])
def test_deltas_follow_slot_remap(hf, cases, host_device, remap):
    """Two requests (an image row, delta < 0, and a text row, delta 0) swap decode rows after one step, as the plugin
    condenses its batch: only ``slot_remap`` tells the model. Without it the rows' rotations are swapped and the
    logits leave HF's (the "remap_ignored" case checks that this test would catch it)."""
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    two = [cases[0], cases[2]]
    batch = PluginBatch(FAMILY, model, kv, two, slots=[0, 1])
    batch.prefill()
    batch.joined = False  # the deltas come from the model's own slots, as prefill left them
    scores = []
    for step in range(3):
        for i, c in enumerate(two):
            batch.tokens[i].append(c.sequence[len(batch.tokens[i])])
        swapped = step >= 1
        rows = [1, 0] if swapped else [0, 1]
        slot_remap = torch.tensor([1, 0, 2, 3], dtype=torch.int32) if step == 1 and remap else None
        out = batch.decode(rows=rows, slot_remap=slot_remap)
        scores.append([pcc(row, c.logits[len(t) - 1]) for row, c, t in zip(out, two, batch.tokens)])
    print(f"\nslot_remap {'given' if remap else 'ignored'}: PCC per step {[[round(s, 4) for s in x] for x in scores]}")
    threshold = FAMILY.thresholds["accuracy"]
    if remap:
        assert min(min(s) for s in scores) >= threshold
    else:
        assert min(min(s) for s in scores[1:]) < threshold
