"""Gemma 3 against HF transformers (float32) on a tiny random config, host backend, both precision profiles.

The image tokens of the vision tower + projector (vision heads of 32, and of 48 zero-padded to whole tiles), the
prefill logits of a batch holding a one-image row, a two-image row and a text-only row (every prompt longer than the
sliding window), and every teacher-forced decode step along HF's greedy continuation (HF's full forward over the
sequence, with ``token_type_ids``: its bidirectional image attention), PCC >= 0.99; free-running greedy tokens
against HF ``generate`` under the closeness rule; the prefill masks against HF's own; each Gemma-specific path shown
live (the logits leave HF's without it); a later prefill chunk; traced decode and device sampling (meshes:
``test_tensor_parallel.py``). The class is called with keywords as TT vLLM's plugin calls it (stale tails in token
and page-table rows, ``empty_slots``, decode padded with ``start_pos = -1``).

HF's ``Gemma3ForConditionalGeneration`` does not apply ``final_logit_softcapping`` (only ``Gemma3ForCausalLM`` and
vLLM's Gemma 3 do); the reference logits here are HF's, capped as the config says. The cap is monotonic: greedy
tokens and top-5 sets are HF's own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import create_masks_for_vision_model, get_block_sequence_ids_for_mask

from tests.closeness import pcc, rows_agree
from tt_models.models.gemma3 import model as gemma3_model
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.gemma3.masks import MASKED, prefill_mask
from tt_models.runtime import close_device, host, open_device, use
from tt_models.testing.gemma3 import (IMAGE_TOKEN, SLIDING_WINDOW, UNTILED_HEADS, hf_inputs, processed, prompt,
                                      tiny_gemma3)
from tt_models.testing.images import random_image

THRESHOLD = 0.99
PROFILES = ["accuracy", "performance"]
MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 24, 96
NEW_TOKENS = 12
# (width, height) before the processor resizes them to 64 x 64: landscape, portrait, square.
IMAGES = [(80, 50), (40, 60), (64, 64)]


@dataclass(eq=False)  # (tensor fields: pytest's failure report would compare them)
class Case:
    tokens: list[int]
    pixel_values: list[torch.Tensor]
    sequence: list[int]  # the prompt and HF's greedy continuation
    logits: torch.Tensor  # HF's logits (soft-capped) at every position of ``sequence``


def capped(hf, logits: torch.Tensor) -> torch.Tensor:
    cap = hf.config.text_config.final_logit_softcapping
    return cap * torch.tanh(logits / cap)


@pytest.fixture(scope="module")
def hf():
    return tiny_gemma3()


@pytest.fixture(scope="module")
def images():
    return processed([random_image(w, h, seed=i) for i, (w, h) in enumerate(IMAGES)])


@pytest.fixture(scope="module")
def cases(hf, images):
    """One image; two images; text only: each prompt longer than the sliding window."""
    g = torch.Generator().manual_seed(3)

    def text(n):
        return torch.randint(3, 490, (n,), generator=g).tolist()

    rows = [(prompt([text(12), text(25)], 1), images[:1]), (prompt([text(3), text(4), text(9)], 2), images[1:]),
            (text(45), [])]
    out = []
    with torch.no_grad():
        for tokens, pv in rows:
            assert len(tokens) > SLIDING_WINDOW
            sequence = hf.generate(**hf_inputs(tokens, pv), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                   do_sample=False, eos_token_id=None, pad_token_id=0)[0].tolist()
            out.append(Case(tokens, pv, sequence, capped(hf, hf(**hf_inputs(sequence, pv)).logits[0])))
    return out


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
    with use(host_device), torch.no_grad():
        alone = [host.to_torch(model.image_tokens(pv[0]))[0, 0] for pv in images]
        scores = [pcc(a.float(), hf.model.get_image_features(pv).pooler_output[0]) for a, pv in zip(alone, images)]
        batched = host.to_torch(model.image_table([pv[0] for pv in images]))[0, 0]
        monkeypatch.setattr(gemma3_model, "MAX_PATCHES_PER_FORWARD", 2 * model.vision_args.patches_per_side ** 2)
        chunked = host.to_torch(model.image_table([pv[0] for pv in images]))[0, 0]  # batches of 2 and 1
    print(f"\nimage tokens, {heads} heads, {profile}: PCC {[round(s, 5) for s in scores]}")
    assert min(scores) >= THRESHOLD
    assert torch.equal(batched, torch.cat(alone)) and torch.equal(chunked, torch.cat(alone))


class PluginBatch:
    """Requests in batch slots, called as the plugin calls the class; each request has its own blocks."""

    def __init__(self, model, kv, cases: list[Case], slots: list[int], seed: int = 0):
        self.model, self.kv, self.cases, self.slots = model, kv, cases, slots
        pool = list(range(NUM_BLOCKS))
        random.Random(seed).shuffle(pool)
        width = MAX_LEN // BLOCK
        self.blocks = [pool[i * width:(i + 1) * width] for i in range(len(cases))]
        self.tokens = [list(c.tokens) for c in cases]

    def prefill(self, **kwargs) -> torch.Tensor:
        """The rows' last-position logits ``[n, V]`` (tokens ``[n]`` with ``sampling_params``)."""
        width = max(len(t) for t in self.tokens) + 3
        out = self.model.prefill_forward(
            tokens=torch.tensor([t + [7] * (width - len(t)) for t in self.tokens]),  # stale tails
            page_table=torch.tensor(self.blocks, dtype=torch.int32), kv_cache=self.kv,
            prompt_lens=[len(t) for t in self.tokens], pixel_values=[c.pixel_values or None for c in self.cases],
            empty_slots=self.slots, enable_trace=False, **{"start_pos": [0] * len(self.tokens), **kwargs})
        return out if "sampling_params" in kwargs else out[:, 0]

    def decode(self, **kwargs) -> list[torch.Tensor]:
        """One step of every request in its slot's row; each request's logits (token with ``sampling_params``)."""
        tokens = torch.zeros(MAX_BATCH, 1, dtype=torch.int32)
        start_pos = torch.full((MAX_BATCH,), -1)
        page_table = torch.zeros(MAX_BATCH, MAX_LEN // BLOCK, dtype=torch.int32)  # stale tails: block 0
        for i, row in enumerate(self.slots):
            tokens[row, 0], start_pos[row] = self.tokens[i][-1], len(self.tokens[i]) - 1
            page_table[row] = torch.tensor(self.blocks[i])
        out = self.model.decode_forward(tokens=tokens, start_pos=start_pos, page_table=page_table, kv_cache=self.kv,
                                        **{"enable_trace": False, **kwargs})
        return [out[row].squeeze(0) for row in self.slots]


def _generator(hf, device, profile):
    model = Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                           max_seq_len=MAX_LEN, optimizations=profile)
    n_kv_heads, head_dim = model.models[0].kv_geometry  # one chip's
    kv = model.allocate_kv_cache((NUM_BLOCKS, n_kv_heads, BLOCK, head_dim), torch.bfloat16, model.models[0].n_layers)
    return model, kv


def _teacher_forced(hf, device, profile, cases) -> list[torch.Tensor]:
    """Our prefill and decode steps along HF's greedy sequences: each request's logits at its prompt's last position
    and every later one ``[NEW_TOKENS + 1, V]``."""
    model, kv = _generator(hf, device, profile)
    model.warmup_model_prefill(kv_cache=kv)
    batch = PluginBatch(model, kv, cases, slots=[1, 0, 3])
    steps = [batch.prefill()]
    for _ in range(NEW_TOKENS):
        for i, c in enumerate(cases):
            batch.tokens[i].append(c.sequence[len(batch.tokens[i])])
        steps.append(torch.stack(batch.decode()))
    return [torch.stack([s[i] for s in steps]) for i in range(len(cases))]


@pytest.fixture(scope="module")
def ours(hf, cases):
    """Our teacher-forced logits per profile (computed once, for two tests)."""
    device = open_device("host")
    try:
        return {profile: _teacher_forced(hf, device, profile, cases) for profile in PROFILES}
    finally:
        close_device(device)


def _reference(c: Case) -> torch.Tensor:
    """HF's logits at the positions :func:`_teacher_forced` covers."""
    return c.logits[len(c.tokens) - 1:]


@pytest.mark.parametrize("profile", PROFILES)
def test_prefill_and_teacher_forced_decode_match_hf(cases, ours, profile):
    prefill = [pcc(o[0], _reference(c)[0]) for o, c in zip(ours[profile], cases)]
    decode = [min(pcc(a, b) for a, b in zip(o[1:], _reference(c)[1:])) for o, c in zip(ours[profile], cases)]
    print(f"\n{profile}: prefill PCC {[round(s, 5) for s in prefill]}, decode min PCC per request "
          f"{[round(s, 5) for s in decode]} (one image, two images, text only)")
    assert min(prefill) >= THRESHOLD and min(decode) >= THRESHOLD


def test_gemma_paths_are_live(hf, cases, ours):
    """Each Gemma-specific path moves the logits far more than our error: against HF without it (the image tokens
    attending causally only, no sliding window, no soft-cap) our logits are at least 5x further off than against HF
    itself, so leaving one out would show here even where the 0.99 threshold would not see it."""
    config = hf.config.text_config
    with torch.no_grad():
        causal = [hf(**{k: v for k, v in hf_inputs(c.sequence, c.pixel_values).items() if k != "token_type_ids"})
                  for c in cases[:2]]
        config.sliding_window = MAX_LEN * 4
        try:
            unwindowed = [hf(**hf_inputs(c.sequence, c.pixel_values)) for c in cases]
        finally:
            config.sliding_window = SLIDING_WINDOW
        plain = [hf(**hf_inputs(c.sequence, c.pixel_values)) for c in cases]

    def trimmed(out, c):
        return capped(hf, out.logits[0])[len(c.tokens) - 1:]

    ablations = {
        "causal image attention": [trimmed(o, c) for o, c in zip(causal, cases)],
        "no sliding window": [trimmed(o, c) for o, c in zip(unwindowed, cases)],
        "no soft-cap": [o.logits[0, len(c.tokens) - 1:] for o, c in zip(plain, cases)],
    }
    ours = ours["accuracy"]
    for name, references in ablations.items():
        for o, c, ablated in zip(ours, cases, references):
            error, gap = 1 - pcc(o, _reference(c)), 1 - pcc(o, ablated)
            print(f"\n{name}: 1 - PCC {error:.2e} against HF, {gap:.2e} against HF without it")
            assert gap > 5 * error, name


def test_later_prefill_chunk_matches_hf(hf, cases, host_device):
    """A one-token prefill past the prompt (``start_pos > 0``, as tt-models' engine sends a recomputed step): text-only
    chunks attend causally through the cache; the two-image row's chunk restarts at block 32 inside its second image,
    so it is rerun from position 0 with the images."""
    model, kv = _generator(hf, host_device, "accuracy")
    batch = PluginBatch(model, kv, cases, slots=[0, 1, 2])
    batch.prefill()
    for i, c in enumerate(cases):
        batch.tokens[i].append(c.sequence[len(c.tokens)])
    assert bool((torch.tensor(cases[1].tokens[BLOCK:]) == IMAGE_TOKEN).any())
    logits = batch.prefill(start_pos=[len(c.tokens) for c in cases])
    scores = [pcc(row, c.logits[len(c.tokens)]) for row, c in zip(logits, cases)]
    print(f"\none-token prefill PCC {[round(s, 5) for s in scores]}")
    assert min(scores) >= THRESHOLD


@pytest.mark.numerics
@pytest.mark.parametrize("profile", PROFILES)
def test_free_running_greedy_agrees_with_hf_generate(hf, cases, host_device, profile):
    model, kv = _generator(hf, host_device, profile)
    batch = PluginBatch(model, kv, cases, slots=[0, 1, 2], seed=1)
    logits = batch.prefill()
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


def test_traced_decode_and_device_sampling(hf, cases, host_device):
    """Each decode step three times on the same inputs (rewriting the same K/V): eager, traced (replayed from the
    second step on) and greedy-sampled on the device; traced logits are bit-identical to eager ones and the sampled
    tokens are their argmax (prefill's too)."""
    model, kv = _generator(hf, host_device, "accuracy")
    batch = PluginBatch(model, kv, cases, slots=[2, 0, 1])
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
