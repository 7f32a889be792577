"""Mistral 3 against HF transformers (float32) on a tiny random config, host backend, both precision profiles.

The shared image+text tests (:mod:`tests.models.image_text_cases`: every teacher-forced prefill and decode step of a
one-image, a two-image (of different sizes) and a text-only request, every prompt longer than the text's sliding
window, PCC >= 0.99 in both profiles, and on 1 x 2 and 1 x 4 host meshes; free-running greedy against HF
``generate``); and Mistral 3's own: the image tokens of the Pixtral tower + projector for images of several sizes and
aspect ratios, with the 2-D rotary and the patch merger's order shown live (HF without them is far off); HF's padded
batch with ``image_sizes`` taken as the per-image crops are; a later prefill chunk holding image tokens.
"""

from __future__ import annotations

import pytest
import torch

from tests.closeness import pcc
from tests.models import image_text_cases as shared
from tests.models.image_text_cases import MAX_BATCH, MAX_LEN, PROFILES, ImageTextFamily, PluginBatch, generator
from tt_models.models.mistral3 import projector, vision
from tt_models.models.mistral3.generator import Mistral3ForConditionalGeneration
from tt_models.runtime import host, use
from tt_models.testing import mistral3
from tt_models.testing.images import random_image
from tt_models.testing.mistral3 import SLIDING_WINDOW, tiny_mistral3

FAMILY = ImageTextFamily(
    name="mistral3", tiny=tiny_mistral3, generator=Mistral3ForConditionalGeneration,
    processed=lambda ims: {"pixel_values": mistral3.processed(ims)},
    prompt=lambda text, images: mistral3.prompt(text, images["pixel_values"]),
    hf_inputs=lambda tokens, images: mistral3.hf_inputs(tokens, images["pixel_values"]),
    # (width, height) before the processor: 2 x 3 tokens (landscape), 3 x 2 (portrait), 2 x 1 (the 28 x 42 px one).
    images=[(84, 56), (40, 70), (28, 42)], texts=[(12, 25), (20, 4, 20), (45,)], prompts_longer_than=SLIDING_WINDOW,
    new_tokens=12, thresholds={"accuracy": 0.99, "performance": 0.99}, mock_text_len=20,
    # Both widths 128: the tower's 2 heads 64 wide, the text's 2 heads of 32 and its KV head as they are.
    four_chips=dict(hidden_size=128, text=dict(hidden_size=128)))
# The shared fixtures, and tests (below, in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
hf, images, cases, ours = shared.hf, shared.images, shared.cases, shared.ours

# Images of up to 6 x 6 tokens (12 x 12 patches), so the rotary's positions reach far enough to matter.
TOWER_IMAGES = [(168, 112), (70, 150), (28, 56)]
# The tower's tokens against HF, per profile: far above what a wrong rotary or merge order gives (below).
TOWER_THRESHOLDS = {"accuracy": 0.9995, "performance": 0.999}


def _qwen_rotary(positions: torch.Tensor, args: vision.VisionArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """A plausible wrong 2-D rotary (Qwen2.5-VL's: row and column on the same frequencies)."""
    quarter = args.head_dim // 4
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, 2 * quarter, 2, dtype=torch.float) / (2 * quarter)))
    angles = (positions.float()[:, :, None] * inv_freq).reshape(len(positions), 2 * quarter)
    return angles.cos().repeat_interleave(2, dim=-1), angles.sin().repeat_interleave(2, dim=-1)


def _tower_scores(hf, device, profile: str, pixel_values: list[torch.Tensor]) -> list[float]:
    model = Mistral3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                             max_seq_len=MAX_LEN, optimizations=profile).models[0]
    with use(device), torch.no_grad():
        return [pcc(host.to_torch(model.image_tokens(p))[0, 0].float(),
                    hf.model.get_image_features(p[None], image_sizes=torch.tensor([list(p.shape[1:])]))
                    .pooler_output[0]) for p in pixel_values]


@pytest.mark.parametrize("profile", PROFILES)
def test_image_tokens_match_hf(hf, host_device, profile):
    pixel_values = mistral3.processed([random_image(w, h, seed=i) for i, (w, h) in enumerate(TOWER_IMAGES)],
                                      longest_edge=168)
    scores = _tower_scores(hf, host_device, profile, pixel_values)
    print(f"\nimage tokens {profile}: PCC {[round(s, 5) for s in scores]} for "
          f"{[list(p.shape[1:]) for p in pixel_values]} px")
    assert min(scores) >= TOWER_THRESHOLDS[profile]


def test_rotary_and_merge_order_are_live(hf, host_device, monkeypatch):
    """Against HF, a tower with a plausible wrong 2-D rotary (row and column on the same frequencies), with the axes
    swapped, or with the merger's columns left in HF's channel-major order falls below the accuracy threshold."""
    pixel_values = mistral3.processed([random_image(168, 112, seed=0)], longest_edge=168)
    rotary = vision.rotary_cos_sin
    ablations = {"same frequencies for rows and columns": (vision, "rotary_cos_sin", _qwen_rotary),
                 "rows and columns swapped": (vision, "rotary_cos_sin", lambda p, a: rotary(p.flip(-1), a)),
                 "channel-major merge": (projector, "patch_major", lambda weight, merge: weight)}
    for name, (module, attribute, wrong) in ablations.items():
        with monkeypatch.context() as patch:
            patch.setattr(module, attribute, wrong)
            score = _tower_scores(hf, host_device, "accuracy", pixel_values)[0]
        print(f"\n{name}: PCC {score:.5f}")
        assert score < TOWER_THRESHOLDS["accuracy"], name


def test_hf_padded_batch_with_image_sizes(hf, cases, host_device):
    """A two-image row given as HF's processor gives it (one batch padded to the larger image, ``image_sizes``)
    prefills to the same logits as the per-image crops vLLM's processor gives."""
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    case = cases[1]
    inputs = mistral3.hf_inputs(case.tokens, case.images["pixel_values"])
    common = dict(tokens=torch.tensor([case.tokens]), page_table=torch.tensor([[3, 4, 5]], dtype=torch.int32),
                  kv_cache=kv, prompt_lens=[len(case.tokens)], start_pos=[0])
    cropped = model.prefill_forward(**common, pixel_values=[case.images["pixel_values"]])
    padded = model.prefill_forward(**common, pixel_values=[inputs["pixel_values"]],
                                   image_sizes=[inputs["image_sizes"]])
    assert torch.equal(cropped, padded)
    assert pcc(padded[0, 0], case.reference[0]) >= FAMILY.thresholds["accuracy"]


test_prefill_and_teacher_forced_decode_match_hf = shared.test_prefill_and_teacher_forced_decode_match_hf


def test_sliding_window_is_live(hf, cases, ours):
    """Against HF without its sliding window our logits are at least 5x further off than against HF itself (every
    prompt is longer than the window), so leaving the window out would show even where the 0.99 threshold would
    not."""
    config = hf.config.text_config
    config.sliding_window = None
    try:
        with torch.no_grad():
            unwindowed = [hf(**FAMILY.hf_inputs(c.sequence, c.images)).logits[0, len(c.tokens) - 1:] for c in cases]
    finally:
        config.sliding_window = SLIDING_WINDOW
    for o, c, ablated in zip(ours["accuracy"].logits, cases, unwindowed):
        error, gap = 1 - pcc(o, c.reference), 1 - pcc(o, ablated)
        print(f"\nno sliding window: 1 - PCC {error:.2e} against HF, {gap:.2e} against HF without it")
        assert gap > 5 * error


test_mesh_matches_hf = shared.test_mesh_matches_hf


def test_later_prefill_chunk_matches_hf(hf, cases, host_device):
    """Chunked prefill: each prompt in two chunks (the second from block 1, ``start_pos = 32``), the two-image row's
    second chunk holding the image tokens of its second image, then a one-token prefill past the prompt."""
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    batch = PluginBatch(FAMILY, model, kv, cases, slots=[0, 1, 2])
    full = batch.tokens
    batch.tokens = [t[:32] for t in full]
    batch.prefill()
    batch.tokens = full
    assert bool((torch.tensor(cases[1].tokens[32:]) == mistral3.IMAGE_TOKEN).any())
    second = batch.prefill(start_pos=[32] * len(cases))
    for i, c in enumerate(cases):
        batch.tokens[i].append(c.sequence[len(c.tokens)])
    one_token = batch.prefill(start_pos=[len(c.tokens) for c in cases])
    scores = [pcc(row, c.reference[0]) for row, c in zip(second, cases)]
    scores += [pcc(row, c.logits[len(c.tokens)]) for row, c in zip(one_token, cases)]
    print(f"\nsecond chunk and one-token prefill PCC {[round(s, 5) for s in scores]}")
    assert min(scores) >= FAMILY.thresholds["accuracy"]


test_free_running_greedy_agrees_with_hf_generate = shared.test_free_running_greedy_agrees_with_hf_generate


def test_bad_image_inputs_are_refused(hf, cases, host_device):
    """An image that is not whole merged tokens, and fewer images than the prompt's image tokens, are refused with
    the problem named."""
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    case = cases[1]
    common = dict(tokens=torch.tensor([case.tokens]), page_table=torch.tensor([[3, 4, 5]], dtype=torch.int32),
                  kv_cache=kv, prompt_lens=[len(case.tokens)], start_pos=[0])
    first, second = case.images["pixel_values"]
    with pytest.raises(ValueError, match="multiples of patch_size"):
        model.prefill_forward(**common, pixel_values=[[first, torch.nn.functional.pad(second, (0, 2))]])
    with pytest.raises(ValueError, match="image tokens in the prompt but the 1 images"):
        model.prefill_forward(**common, pixel_values=[[first]])
