"""The image+text families' tests against HF, written once: a family's test module declares an
:class:`ImageTextFamily`, binds ``family = family_fixture(ITS_FAMILY)`` and the shared fixtures and tests it runs to
names of its own (pytest collects them there, under that module's name); its family-specific tests use
:class:`PluginBatch` and :func:`generator`.

The shared tests, on a tiny random config, host backend, both precision profiles: every teacher-forced step (the
prefill logits of a batch holding a one-image row, a two-image row and a text-only row, then every decode step along
HF's greedy continuation, against HF's full forward over the sequence), PCC at the family's threshold per profile;
free-running greedy tokens against HF ``generate`` under the closeness rule (:mod:`tests.closeness`); every
teacher-forced step on 1 x 2 and 1 x 4 host meshes; on the mock
n150, prefill (a two-image row and a text-only row) and a decode step with the real ttnn validating every call
(values read back are zeros there, so only shapes are checked). (Tensor-parallel on a mock n300, every family in one
process: ``tests/models/test_image_text_n300.py``, the family's cases run under its ``name``.)

The class is called with keywords as TT vLLM's plugin calls it (stale tails in token and page-table rows,
``empty_slots``, decode padded with ``start_pos = -1``; an M-RoPE family's ``rope_deltas_all_users`` only when a
request joined).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
from PIL import Image

from tests.closeness import pcc, rows_agree
from tt_models.runtime import close_device, open_device
from tt_models.testing.images import random_image

PROFILES = ["accuracy", "performance"]
MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 24, 96
MOCK_WIDTH = 3  # the mock n150's blocks per row

# A request's images as the plugin hands them to ``prefill_forward`` (one row's list per keyword: Gemma 3's
# ``pixel_values``, Qwen2.5-VL's ``pixel_values`` and ``image_grid_thw``); empty lists for a text-only request.
Images = dict[str, list[torch.Tensor]]


def hf_logits(hf: Any, inputs: dict) -> torch.Tensor:
    """HF's logits ``[S, V]`` of one prompt."""
    return hf(**inputs).logits[0]


@dataclass(frozen=True)
class ImageTextFamily:
    """What an image+text family declares (Gemma 3 and Qwen2.5-VL in their test modules; the families that follow,
    a declaration each): the shared fixtures and tests run the rest."""
    name: str  # its cases' family in tests.models.image_text_on_mock
    tiny: Callable[[], Any]  # the tiny random HF model (float32, eager attention)
    generator: type  # the class TT vLLM's plugin calls (``from_state_dict``)
    processed: Callable[[list[Image.Image]], Images]  # the processor: images -> each image's prefill arguments
    prompt: Callable[[list[list[int]], Images], list[int]]  # text runs around the images' expanded placeholders
    hf_inputs: Callable[[list[int], Images], dict]  # HF's forward and generate inputs of a prompt and its images
    images: list[tuple[int, int]]  # the test images' (width, height) before the processor
    # Each request's text runs (lengths, around its images): one image, two images (the next two), text only.
    texts: list[tuple[int, ...]]
    new_tokens: int  # HF's greedy continuation: the decode steps compared
    thresholds: dict[str, float]  # PCC against HF per profile
    mock_text_len: int  # the mock n150's text-only row
    # ``tiny``'s overrides for a 1 x 4 mesh: every width a multiple of 4 x 32 (each chip holds whole tiles of the
    # residual stream), the head counts as they are (fewer heads than chips: padded and replicated).
    four_chips: dict[str, Any]
    reference: Callable[[Any, dict], torch.Tensor] = hf_logits  # HF's logits [S, V] of hf_inputs
    rope_delta: Callable[[Any, list[int], Images], int] | None = None  # M-RoPE: HF's delta of an image prompt
    prompts_longer_than: int = 0  # (Gemma 3: the sliding window)
    kv_dtype: torch.dtype = torch.bfloat16


@dataclass(eq=False)  # (tensor fields: pytest's failure report would compare them)
class Case:
    tokens: list[int]
    images: Images
    sequence: list[int]  # the prompt and HF's greedy continuation
    logits: torch.Tensor  # HF's logits at every position of ``sequence``
    delta: int  # HF's rope delta (M-RoPE; else 0)

    @property
    def reference(self) -> torch.Tensor:
        """HF's logits at the positions the teacher-forced run covers: the prompt's last and every later one."""
        return self.logits[len(self.tokens) - 1:]


@dataclass(eq=False)
class TeacherForced:
    logits: list[torch.Tensor]  # each request's, at its prompt's last position and every later one
    deltas: list[int] | None  # the prefill's rope deltas (M-RoPE)


def build_cases(family: ImageTextFamily, hf: Any, images: Images) -> list[Case]:
    """The requests of ``family.texts``, each with the next of ``images``; HF's greedy continuation and logits."""
    g = torch.Generator().manual_seed(3)
    out, used = [], 0
    with torch.no_grad():
        for lengths in family.texts:
            n = len(lengths) - 1
            row = {name: values[used:used + n] for name, values in images.items()}
            used += n
            tokens = family.prompt([torch.randint(3, 490, (k,), generator=g).tolist() for k in lengths], row)
            assert len(tokens) > family.prompts_longer_than
            sequence = hf.generate(**family.hf_inputs(tokens, row), max_new_tokens=family.new_tokens,
                                   min_new_tokens=family.new_tokens, do_sample=False, eos_token_id=None,
                                   pad_token_id=0)[0].tolist()
            delta = family.rope_delta(hf, tokens, row) if family.rope_delta and n else 0
            out.append(Case(tokens, row, sequence, family.reference(hf, family.hf_inputs(sequence, row)), delta))
    return out


class PluginBatch:
    """Requests in batch slots, called as the plugin calls the class; each request has its own blocks."""

    def __init__(self, family: ImageTextFamily, model: Any, kv: Any, cases: list[Case], slots: list[int],
                 seed: int = 0):
        self.model, self.kv, self.cases, self.slots = model, kv, cases, slots
        pool = list(range(NUM_BLOCKS))
        random.Random(seed).shuffle(pool)
        width = MAX_LEN // BLOCK
        self.blocks = [pool[i * width:(i + 1) * width] for i in range(len(cases))]
        self.tokens = [list(c.tokens) for c in cases]
        self.deltas: torch.Tensor | None = None  # the last prefill's (M-RoPE)
        self.joined = family.rope_delta is not None  # M-RoPE: the first decode after a prefill carries every delta

    def prefill(self, **kwargs: Any) -> torch.Tensor:
        """The rows' last-position logits ``[n, V]`` (tokens ``[n]`` with ``sampling_params``)."""
        width = max(len(t) for t in self.tokens) + 3
        images = {name: [c.images[name] or None for c in self.cases] for name in self.cases[0].images}
        out = self.model.prefill_forward(
            tokens=torch.tensor([t + [7] * (width - len(t)) for t in self.tokens]),  # stale tails
            page_table=torch.tensor(self.blocks, dtype=torch.int32), kv_cache=self.kv,
            prompt_lens=[len(t) for t in self.tokens], empty_slots=self.slots, enable_trace=False, **images,
            **{"start_pos": [0] * len(self.tokens), **kwargs})
        out, self.deltas = out if isinstance(out, tuple) else (out, None)
        return out if "sampling_params" in kwargs else out[:, 0]

    def decode(self, rows: list[int] | None = None, **kwargs: Any) -> list[torch.Tensor]:
        """One step with request ``i`` in decode row ``rows[i]`` (default its slot); each request's logits (token
        with ``sampling_params``)."""
        rows = self.slots if rows is None else rows
        tokens = torch.zeros(MAX_BATCH, 1, dtype=torch.int32)
        start_pos = torch.full((MAX_BATCH,), -1)
        page_table = torch.zeros(MAX_BATCH, MAX_LEN // BLOCK, dtype=torch.int32)  # stale tails: block 0
        for i, row in enumerate(rows):
            tokens[row, 0], start_pos[row] = self.tokens[i][-1], len(self.tokens[i]) - 1
            page_table[row] = torch.tensor(self.blocks[i])
        if self.joined:
            deltas = [0] * (max(rows) + 1)
            for i, row in enumerate(rows):
                deltas[row] = self.cases[i].delta
            kwargs["rope_deltas_all_users"] = deltas
            self.joined = False
        out = self.model.decode_forward(tokens=tokens, start_pos=start_pos, page_table=page_table, kv_cache=self.kv,
                                        **{"enable_trace": False, **kwargs})
        return [out[row].squeeze(0) for row in rows]


def generator(family: ImageTextFamily, hf: Any, device: Any, profile: str,
              max_len: int = MAX_LEN) -> tuple[Any, Any]:
    """The family's class on ``hf``'s weights and its KV cache of ``NUM_BLOCKS`` blocks."""
    model = family.generator.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH, max_seq_len=max_len,
                                             optimizations=profile)
    n_kv_heads, head_dim = model.models[0].kv_geometry  # one chip's
    kv = model.allocate_kv_cache((NUM_BLOCKS, n_kv_heads, BLOCK, head_dim), family.kv_dtype, model.models[0].n_layers)
    return model, kv


def teacher_forced(family: ImageTextFamily, hf: Any, device: Any, profile: str, cases: list[Case]) -> TeacherForced:
    """Our prefill and decode steps along HF's greedy sequences."""
    model, kv = generator(family, hf, device, profile)
    model.warmup_model_prefill(kv_cache=kv)
    batch = PluginBatch(family, model, kv, cases, slots=[1, 0, 3])
    steps = [batch.prefill()]
    deltas = None if batch.deltas is None else batch.deltas.tolist()
    for _ in range(family.new_tokens):
        for i, c in enumerate(cases):
            batch.tokens[i].append(c.sequence[len(batch.tokens[i])])
        steps.append(torch.stack(batch.decode()))
    return TeacherForced([torch.stack([s[i] for s in steps]) for i in range(len(cases))], deltas)


def family_fixture(declared: ImageTextFamily) -> Any:
    """The fixture ``family`` of a module that runs the shared fixtures and tests for ``declared``."""
    @pytest.fixture(scope="module", name="family")
    def family() -> ImageTextFamily:
        return declared
    return family


@pytest.fixture(scope="module")
def hf(family: ImageTextFamily) -> Any:
    return family.tiny()


@pytest.fixture(scope="module")
def images(family: ImageTextFamily) -> Images:
    return family.processed([random_image(w, h, seed=i) for i, (w, h) in enumerate(family.images)])


@pytest.fixture(scope="module")
def cases(family: ImageTextFamily, hf: Any, images: Images) -> list[Case]:
    return build_cases(family, hf, images)


@pytest.fixture(scope="module")
def ours(family: ImageTextFamily, hf: Any, cases: list[Case]) -> dict[str, TeacherForced]:
    """Our teacher-forced logits per profile (computed once, for the tests that compare them)."""
    device = open_device("host")
    try:
        return {profile: teacher_forced(family, hf, device, profile, cases) for profile in PROFILES}
    finally:
        close_device(device)


@pytest.mark.parametrize("profile", PROFILES)
def test_prefill_and_teacher_forced_decode_match_hf(family, cases, ours, profile):
    run, threshold = ours[profile], family.thresholds[profile]
    if run.deltas is not None:  # M-RoPE: HF's deltas, 0 for the text-only row, < 0 for an image row
        assert run.deltas == [c.delta for c in cases] and cases[2].delta == 0 and min(run.deltas) < 0
    prefill = [pcc(o[0], c.reference[0]) for o, c in zip(run.logits, cases)]
    decode = [min(pcc(a, b) for a, b in zip(o[1:], c.reference[1:])) for o, c in zip(run.logits, cases)]
    print(f"\n{profile}: prefill PCC {[round(s, 5) for s in prefill]}, decode min PCC per request "
          f"{[round(s, 5) for s in decode]} (one image, two images, text only)")
    assert min(prefill) >= threshold and min(decode) >= threshold


@pytest.mark.parametrize("mesh_shape", [(1, 2), (1, 4)], ids=["1x2", "1x4"])
def test_mesh_matches_hf(family, hf, images, cases, mesh_shape):
    """Tensor-parallel over a host mesh (the towers' heads and MLPs, the text heads and vocabulary split; heads fewer
    than the chips padded with zero heads, a KV head replicated): every teacher-forced step as on one chip, against
    HF. Over 4 chips the tiny model is ``family.four_chips`` wider, its own HF reference."""
    if mesh_shape[1] == 4:
        hf = family.tiny(**family.four_chips)
        cases = build_cases(family, hf, images)
    device = open_device("host", mesh_shape=mesh_shape)
    try:
        run = teacher_forced(family, hf, device, "accuracy", cases)
    finally:
        close_device(device)
    scores = [[pcc(a, b) for a, b in zip(o, c.reference)] for o, c in zip(run.logits, cases)]
    print(f"\n{mesh_shape[0]} x {mesh_shape[1]} mesh: min PCC over every step {[round(min(s), 5) for s in scores]} "
          "(one image, two images, text only)")
    assert min(min(s) for s in scores) >= family.thresholds["accuracy"]


@pytest.mark.numerics
@pytest.mark.parametrize("profile", PROFILES)
def test_free_running_greedy_agrees_with_hf_generate(family, hf, cases, host_device, profile):
    model, kv = generator(family, hf, host_device, profile)
    batch = PluginBatch(family, model, kv, cases, slots=[0, 1, 2], seed=1)
    logits = batch.prefill()
    our_rows = [[row] for row in logits]
    for _ in range(family.new_tokens - 1):
        for rows, tokens in zip(our_rows, batch.tokens):
            tokens.append(int(rows[-1].argmax()))
        for rows, row in zip(our_rows, batch.decode()):
            rows.append(row)
    for i, (c, rows) in enumerate(zip(cases, our_rows)):
        exact = rows_agree([int(row.argmax()) for row in rows], c.sequence[len(c.tokens):], rows, c.reference[:-1])
        print(f"\n{profile} request {i}: {exact}/{family.new_tokens} tokens identical to HF generate")


@pytest.mark.parametrize("profile", PROFILES)
def test_n150(family, mock_device, profile):
    """Warm-ups, a prefill of a two-image row and a text-only row, one decode step (traced where the device traces)
    of the padded batch: the logits' shapes."""
    hf = family.tiny()
    model, kv = generator(family, hf, mock_device, profile, max_len=MOCK_WIDTH * BLOCK)
    model.warmup_model_prefill(kv_cache=kv)
    model.warmup_model_decode(kv_cache=kv, max_batch_size=MAX_BATCH, num_blocks=MOCK_WIDTH)
    images = family.processed([random_image(w, h, seed=i) for i, (w, h) in enumerate(family.images[:2])])
    image_prompt = family.prompt([[5, 6], [7, 8], [9]], images)
    tokens = torch.full((2, len(image_prompt)), 7)
    tokens[0] = torch.tensor(image_prompt)
    logits = model.prefill_forward(
        tokens=tokens, page_table=torch.tensor([[5, 9, 2], [1, 3, 4]]), kv_cache=kv,
        prompt_lens=[len(image_prompt), family.mock_text_len], start_pos=[0, 0], empty_slots=[0, MAX_BATCH - 1],
        **{name: [values, None] for name, values in images.items()})
    logits, deltas = logits if isinstance(logits, tuple) else (logits, None)
    joined = {} if deltas is None else {"rope_deltas_all_users": [int(deltas[0]), 0, 0, 0]}
    decoded = model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32),
        start_pos=torch.tensor([len(image_prompt), -1, -1, family.mock_text_len]),
        page_table=torch.tensor([[5, 9, 2], [0, 0, 0], [0, 0, 0], [1, 3, 4]], dtype=torch.int32), kv_cache=kv,
        enable_trace=True, **joined)  # eager on the mock device
    vocab = hf.config.text_config.vocab_size
    assert (tuple(logits.shape), tuple(decoded.shape)) == ((2, 1, vocab), (MAX_BATCH, 1, vocab))
    if deltas is not None:
        assert deltas[0] < 0 and deltas[1] == 0
