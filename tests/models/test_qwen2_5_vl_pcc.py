"""Qwen2.5-VL against HF transformers (float32) on a tiny random config, host backend, both precision profiles.

The vision tower's output for images of several sizes and aspect ratios (window attention live), the prefill logits
of a batch holding a one-image row, a two-image row and a text-only row, and every teacher-forced decode step along
HF's greedy continuation (HF's full forward over the sequence: its M-RoPE positions, i.e. position + rope delta past
the prompt), PCC >= 0.99; free-running greedy tokens against HF ``generate`` under the closeness rule; the per-slot
deltas following ``slot_remap``. The class is called with keywords as TT vLLM's plugin calls it (stale tails in
token and page-table rows, ``empty_slots``, decode padded with ``start_pos = -1``, ``rope_deltas_all_users`` only
when a request joined).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch
from transformers.vision_utils import get_vision_window_index

from tests.closeness import pcc, rows_agree
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.models.qwen2_5_vl.rope_index import mrope_positions
from tt_models.models.qwen2_5_vl.vision import VisionArgs, VisionTower
from tt_models.runtime import host, use
from tt_models.testing.images import random_image
from tt_models.testing.qwen2_5_vl import IMAGE_TOKEN, hf_inputs, processed, prompt, tiny_qwen2_5_vl
from tt_models.tt.model_config import Precision

THRESHOLD = 0.99
PROFILES = ["accuracy", "performance"]
MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 24, 96
NEW_TOKENS = 10
# (width, height): landscape (8 x 14 patches), portrait (12 x 4), the smallest (4 x 4), square (10 x 10).
IMAGES = [(200, 120), (60, 180), (56, 56), (140, 140)]


@dataclass(eq=False)  # (tensor fields: pytest's failure report would compare them)
class Case:
    tokens: list[int]
    pixel_values: list[torch.Tensor]
    grids: list[torch.Tensor]
    sequence: list[int]  # the prompt and HF's greedy continuation
    logits: torch.Tensor  # HF's logits at every position of ``sequence``
    delta: int  # HF's rope delta


@pytest.fixture(scope="module")
def hf():
    return tiny_qwen2_5_vl()


@pytest.fixture(scope="module")
def images():
    return processed([random_image(w, h, seed=i) for i, (w, h) in enumerate(IMAGES)])


@pytest.fixture(scope="module")
def cases(hf, images):
    """One image; two images; text only."""
    pixel_values, grids = images
    g = torch.Generator().manual_seed(3)

    def text(n):
        return torch.randint(3, 490, (n,), generator=g).tolist()

    rows = [(prompt([text(5), text(7)], grids[:1]), pixel_values[:1], grids[:1]),
            (prompt([text(3), text(4), text(6)], grids[1:3]), pixel_values[1:3], grids[1:3]),
            (text(23), [], [])]
    out = []
    with torch.no_grad():
        for tokens, pv, gr in rows:
            sequence = hf.generate(**hf_inputs(tokens, pv, gr), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                   do_sample=False, eos_token_id=None, pad_token_id=0)[0].tolist()
            logits = hf(**hf_inputs(sequence, pv, gr)).logits[0]
            ids = torch.tensor([tokens])
            delta = int(hf.model.get_rope_index(ids, (ids == IMAGE_TOKEN).int(), torch.stack(gr))[1]) if gr else 0
            out.append(Case(tokens, pv, gr, sequence, logits, delta))
    return out


def test_window_layout_and_rope_index_match_hf(hf, images, host_device):
    """The host-side bookkeeping: window order and windows as HF's ``get_vision_window_index``, 3-D positions and
    deltas as HF's ``get_rope_index``."""
    vision = hf.config.vision_config
    with use(host_device):
        tower = VisionTower(VisionArgs.from_hf(vision), hf.state_dict(), "model.visual.", host_device,
                            Precision.uniform("accuracy"))
    pixel_values, grids = images
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
        for pixel_values, grid in zip(*images):
            with torch.no_grad():
                ref = hf.model.visual(pixel_values, grid_thw=grid[None]).pooler_output
            ours = host.to_torch(tower.forward(pixel_values, tuple(grid.tolist())))[0, 0].float()
            scores.append(pcc(ours, ref))
    print(f"\nvision {profile}: PCC {[round(s, 5) for s in scores]} for grids {[g.tolist() for g in images[1]]}")
    assert min(scores) >= THRESHOLD


class PluginBatch:
    """Requests in batch slots, called as the plugin calls the class; each request has its own blocks."""

    def __init__(self, model, kv, cases: list[Case], slots: list[int], seed: int = 0):
        self.model, self.kv, self.cases, self.slots = model, kv, cases, slots
        pool = list(range(NUM_BLOCKS))
        random.Random(seed).shuffle(pool)
        width = MAX_LEN // BLOCK
        self.blocks = [pool[i * width:(i + 1) * width] for i in range(len(cases))]
        self.tokens = [list(c.tokens) for c in cases]
        self.joined = True  # the first decode after a prefill carries every row's delta

    def prefill(self) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(t) for t in self.tokens) + 3
        logits, deltas = self.model.prefill_forward(
            tokens=torch.tensor([t + [7] * (width - len(t)) for t in self.tokens]),  # stale tails
            page_table=torch.tensor(self.blocks, dtype=torch.int32), kv_cache=self.kv,
            prompt_lens=[len(t) for t in self.tokens], start_pos=[0] * len(self.tokens),
            pixel_values=[c.pixel_values or None for c in self.cases],
            image_grid_thw=[c.grids or None for c in self.cases], empty_slots=self.slots, enable_trace=False)
        return logits[:, 0], deltas

    def decode(self, rows: list[int] | None = None, slot_remap=None) -> list[torch.Tensor]:
        """One step with request ``i`` in decode row ``rows[i]`` (default its slot); logits per request."""
        rows = self.slots if rows is None else rows
        tokens = torch.zeros(MAX_BATCH, 1, dtype=torch.int32)
        start_pos = torch.full((MAX_BATCH,), -1)
        page_table = torch.zeros(MAX_BATCH, MAX_LEN // BLOCK, dtype=torch.int32)
        for i, row in enumerate(rows):
            tokens[row, 0], start_pos[row] = self.tokens[i][-1], len(self.tokens[i]) - 1
            page_table[row] = torch.tensor(self.blocks[i])
        deltas = None
        if self.joined:
            deltas = [0] * (max(rows) + 1)
            for i, row in enumerate(rows):
                deltas[row] = self.cases[i].delta
            self.joined = False
        out = self.model.decode_forward(tokens=tokens, start_pos=start_pos, page_table=page_table, kv_cache=self.kv,
                                        rope_deltas_all_users=deltas, slot_remap=slot_remap, enable_trace=False)
        return [out[row, 0] for row in rows]


def _generator(hf, device, profile):
    model = Qwen2_5_VLForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                               max_seq_len=MAX_LEN, optimizations=profile)
    args = model.models[0].text.args
    kv = model.allocate_kv_cache((NUM_BLOCKS, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, args.n_layers)
    return model, kv


@pytest.mark.parametrize("profile", PROFILES)
def test_prefill_and_teacher_forced_decode_match_hf(hf, cases, host_device, profile):
    model, kv = _generator(hf, host_device, profile)
    model.warmup_model_prefill(kv_cache=kv)
    batch = PluginBatch(model, kv, cases, slots=[1, 0, 2])
    logits, deltas = batch.prefill()
    assert deltas.tolist() == [c.delta for c in cases] and cases[2].delta == 0 and min(deltas) < 0
    prefill_scores = [pcc(row, c.logits[len(c.tokens) - 1]) for row, c in zip(logits, cases)]
    decode_scores = []
    for _ in range(NEW_TOKENS):
        for i, c in enumerate(cases):
            batch.tokens[i].append(c.sequence[len(batch.tokens[i])])
        step = batch.decode()
        decode_scores.append([pcc(row, c.logits[len(t) - 1]) for row, c, t in zip(step, cases, batch.tokens)])
    worst = [min(s[i] for s in decode_scores) for i in range(len(cases))]
    print(f"\n{profile}: prefill PCC {[round(s, 5) for s in prefill_scores]}, decode min PCC per request "
          f"{[round(s, 5) for s in worst]} (one image, two images, text only)")
    assert min(prefill_scores) >= THRESHOLD and min(worst) >= THRESHOLD


@pytest.mark.numerics
@pytest.mark.parametrize("profile", PROFILES)
def test_free_running_greedy_agrees_with_hf_generate(hf, cases, host_device, profile):
    model, kv = _generator(hf, host_device, profile)
    batch = PluginBatch(model, kv, cases, slots=[0, 1, 2], seed=1)
    logits, _ = batch.prefill()
    our_rows = [[row] for row in logits]
    for _ in range(NEW_TOKENS - 1):
        for rows, tokens in zip(our_rows, batch.tokens):
            tokens.append(int(rows[-1].argmax()))
        for rows, row in zip(our_rows, batch.decode()):
            rows.append(row)
    for i, (c, rows) in enumerate(zip(cases, our_rows)):
        n = len(c.tokens)
        their_rows = c.logits[n - 1: -1]
        exact = rows_agree([int(row.argmax()) for row in rows], c.sequence[n:], rows, their_rows)
        print(f"\n{profile} request {i}: {exact}/{NEW_TOKENS} tokens identical to HF generate")


@pytest.mark.parametrize("remap", [True, False], ids=["slot_remap", "remap_ignored"])
def test_deltas_follow_slot_remap(hf, cases, host_device, remap):
    """Two requests (an image row, delta < 0, and a text row, delta 0) swap decode rows after one step, as the plugin
    condenses its batch: only ``slot_remap`` tells the model. Without it the rows' rotations are swapped and the
    logits leave HF's (the "remap_ignored" case checks that this test would catch it)."""
    model, kv = _generator(hf, host_device, "accuracy")
    two = [cases[0], cases[2]]
    batch = PluginBatch(model, kv, two, slots=[0, 1])
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
    if remap:
        assert min(min(s) for s in scores) >= THRESHOLD
    else:
        assert min(min(s) for s in scores[1:]) < THRESHOLD
