"""Gemma 3 against HF transformers (float32) on a tiny random config, host backend, both precision profiles.

The shared image+text tests (:mod:`tests.models.image_text_cases`: every teacher-forced prefill and decode step of a
one-image, a two-image and a text-only request, PCC >= 0.99, on one chip, 1 x 2 and 1 x 4 host meshes; free-running
greedy against HF ``generate``), with every prompt longer than the sliding window and HF's forward given
``token_type_ids`` (its bidirectional image attention); and Gemma's own: the image tokens of the vision tower +
projector (vision heads of 32, and of 48 zero-padded to whole tiles); the prefill masks against HF's own; each
Gemma-specific path shown live (the logits leave HF's without it); a later prefill chunk; traced decode and device
sampling (greedy over meshes: ``test_tensor_parallel.py``).

HF's ``Gemma3ForConditionalGeneration`` does not apply ``final_logit_softcapping`` (only ``Gemma3ForCausalLM`` and
vLLM's Gemma 3 do); the reference logits here are HF's, capped as the config says. The cap is monotonic: greedy
tokens and top-5 sets are HF's own.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import create_masks_for_vision_model, get_block_sequence_ids_for_mask

from tests.closeness import pcc
from tests.models import image_text_cases as shared
from tests.models.image_text_cases import BLOCK, MAX_BATCH, MAX_LEN, PROFILES, ImageTextFamily, PluginBatch, generator
from tt_models.models.gemma3 import model as gemma3_model
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.gemma3.masks import MASKED, prefill_mask
from tt_models.runtime import host, use
from tt_models.testing import gemma3
from tt_models.testing.gemma3 import IMAGE_TOKEN, SLIDING_WINDOW, UNTILED_HEADS, tiny_gemma3


def capped(hf, logits: torch.Tensor) -> torch.Tensor:
    cap = hf.config.text_config.final_logit_softcapping
    return cap * torch.tanh(logits / cap)


FAMILY = ImageTextFamily(
    name="gemma3", tiny=tiny_gemma3, generator=Gemma3ForConditionalGeneration,
    processed=lambda ims: {"pixel_values": gemma3.processed(ims)},
    prompt=lambda text, images: gemma3.prompt(text, len(images["pixel_values"])),
    hf_inputs=lambda tokens, images: gemma3.hf_inputs(tokens, images["pixel_values"]),
    reference=lambda hf, inputs: capped(hf, hf(**inputs).logits[0]),
    # (width, height) before the processor resizes them to 64 x 64: landscape, portrait, square.
    images=[(80, 50), (40, 60), (64, 64)], texts=[(12, 25), (3, 4, 9), (45,)], prompts_longer_than=SLIDING_WINDOW,
    new_tokens=12, thresholds={"accuracy": 0.99, "performance": 0.99}, mock_text_len=40,
    four_chips=dict(hidden_size=128))  # the tower's 2 heads of 64 (the text's 128 splits as it is)
# The shared fixtures, and tests (below, in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
hf, images, cases, ours = shared.hf, shared.images, shared.cases, shared.ours


def test_prefill_masks_match_hf(hf, cases):
    """The additive masks of both layer types keep exactly what HF's ``create_masks_for_vision_model`` keeps."""
    tokens = torch.tensor([cases[1].tokens])
    n = tokens.shape[1]
    config = hf.config.text_config
    masks = create_masks_for_vision_model(config=config, inputs_embeds=torch.zeros(1, n, 1),
                                          attention_mask=None, cache=None, position_ids=None,
                                          block_sequence_ids=get_block_sequence_ids_for_mask(
                                              (tokens == IMAGE_TOKEN).long()))
    for kind, window in (("full_attention", None), ("sliding_attention", SLIDING_WINDOW)):
        ours = prefill_mask(tokens[0] == IMAGE_TOKEN, n, window)[0, 0] == 0
        theirs = masks[kind][0, 0]
        theirs = theirs if theirs.dtype == torch.bool else theirs == 0
        assert torch.equal(ours, theirs), kind
        padded = prefill_mask(tokens[0] == IMAGE_TOKEN, 64, window)[0, 0]  # a chunk's tile padding: never attended
        assert bool((padded[:n, n:] == MASKED).all()) and torch.equal(padded[:n, :n] == 0, ours)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("heads", ["tiled", "untiled"])
def test_image_tokens_match_hf(hf, images, host_device, profile, heads, monkeypatch):
    """The vision tower and projector: each image's ``mm_tokens_per_image`` tokens (vision heads of 32, and of 48
    zero-padded to 64). A prompt's images (pan-and-scan crops alike) run as one batch, and in chunks past the patch
    budget: each image's tokens bit for bit as it alone gives them (attention stays within an image)."""
    hf = hf if heads == "tiled" else tiny_gemma3(**UNTILED_HEADS)
    model = Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), host_device, MAX_BATCH,
                                                           max_seq_len=MAX_LEN, optimizations=profile).models[0]
    pixel_values = images["pixel_values"]
    with use(host_device), torch.no_grad():
        alone = [host.to_torch(model.image_tokens(pv[0]))[0, 0] for pv in pixel_values]
        scores = [pcc(a.float(), hf.model.get_image_features(pv).pooler_output[0])
                  for a, pv in zip(alone, pixel_values)]
        batched = host.to_torch(model.image_table([pv[0] for pv in pixel_values]))[0, 0]
        monkeypatch.setattr(gemma3_model, "MAX_PATCHES_PER_FORWARD", 2 * model.vision_args.patches_per_side ** 2)
        chunked = host.to_torch(model.image_table([pv[0] for pv in pixel_values]))[0, 0]  # batches of 2 and 1
    print(f"\nimage tokens, {heads} heads, {profile}: PCC {[round(s, 5) for s in scores]}")
    assert min(scores) >= FAMILY.thresholds[profile]
    assert torch.equal(batched, torch.cat(alone)) and torch.equal(chunked, torch.cat(alone))


test_prefill_and_teacher_forced_decode_match_hf = shared.test_prefill_and_teacher_forced_decode_match_hf


def test_gemma_paths_are_live(hf, cases, ours):
    """Each Gemma-specific path moves the logits far more than our error: against HF without it (the image tokens
    attending causally only, no sliding window, no soft-cap) our logits are at least 5x further off than against HF
    itself, so leaving one out would show here even where the 0.99 threshold would not see it."""
    config = hf.config.text_config
    with torch.no_grad():
        causal = [hf(**{k: v for k, v in FAMILY.hf_inputs(c.sequence, c.images).items() if k != "token_type_ids"})
                  for c in cases[:2]]
        config.sliding_window = MAX_LEN * 4
        try:
            unwindowed = [hf(**FAMILY.hf_inputs(c.sequence, c.images)) for c in cases]
        finally:
            config.sliding_window = SLIDING_WINDOW
        plain = [hf(**FAMILY.hf_inputs(c.sequence, c.images)) for c in cases]

    def trimmed(out, c):
        return capped(hf, out.logits[0])[len(c.tokens) - 1:]

    ablations = {
        "causal image attention": [trimmed(o, c) for o, c in zip(causal, cases)],
        "no sliding window": [trimmed(o, c) for o, c in zip(unwindowed, cases)],
        "no soft-cap": [o.logits[0, len(c.tokens) - 1:] for o, c in zip(plain, cases)],
    }
    ours = ours["accuracy"].logits
    for name, references in ablations.items():
        for o, c, ablated in zip(ours, cases, references):
            error, gap = 1 - pcc(o, c.reference), 1 - pcc(o, ablated)
            print(f"\n{name}: 1 - PCC {error:.2e} against HF, {gap:.2e} against HF without it")
            assert gap > 5 * error, name


def test_later_prefill_chunk_matches_hf(hf, cases, host_device):
    """A one-token prefill past the prompt (``start_pos > 0``, as tt-models' engine sends a recomputed step): text-only
    chunks attend causally through the cache; the two-image row's chunk restarts at block 32 inside its second image,
    so it is rerun from position 0 with the images."""
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    batch = PluginBatch(FAMILY, model, kv, cases, slots=[0, 1, 2])
    batch.prefill()
    for i, c in enumerate(cases):
        batch.tokens[i].append(c.sequence[len(c.tokens)])
    assert bool((torch.tensor(cases[1].tokens[BLOCK:]) == IMAGE_TOKEN).any())
    logits = batch.prefill(start_pos=[len(c.tokens) for c in cases])
    scores = [pcc(row, c.logits[len(c.tokens)]) for row, c in zip(logits, cases)]
    print(f"\none-token prefill PCC {[round(s, 5) for s in scores]}")
    assert min(scores) >= FAMILY.thresholds["accuracy"]


test_free_running_greedy_agrees_with_hf_generate = shared.test_free_running_greedy_agrees_with_hf_generate
test_mesh_matches_hf = shared.test_mesh_matches_hf


def test_traced_decode_and_device_sampling(hf, cases, host_device):
    """Each decode step three times on the same inputs (rewriting the same K/V): eager, traced (replayed from the
    second step on) and greedy-sampled on the device; traced logits are bit-identical to eager ones and the sampled
    tokens are their argmax (prefill's too)."""
    model, kv = generator(FAMILY, hf, host_device, "accuracy")
    batch = PluginBatch(FAMILY, model, kv, cases, slots=[2, 0, 1])
    logits = batch.prefill()
    greedy = SimpleNamespace(temperature=[0.0] * len(cases), top_k=[1] * len(cases), top_p=[0.0] * len(cases))
    sampled = batch.prefill(sampling_params=greedy)
    assert sampled.tolist() == logits.argmax(-1).tolist()
    for t, token in zip(batch.tokens, sampled.tolist()):
        t.append(token)
    greedy = SimpleNamespace(temperature=[0.0] * MAX_BATCH, top_k=[1] * MAX_BATCH, top_p=[0.0] * MAX_BATCH)
    for _ in range(3):
        eager = torch.stack(batch.decode())
        traced = torch.stack(batch.decode(enable_trace=True))
        tokens = [int(t) for t in batch.decode(enable_trace=True, sampling_params=greedy)]
        assert torch.equal(eager, traced)
        assert tokens == eager.argmax(-1).tolist()
        for t, token in zip(batch.tokens, tokens):
            t.append(token)
    model.release_traces()
