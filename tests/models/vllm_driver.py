"""Drives a generator class exactly as TT vLLM's runner does (research/contract.md sections 2-3).

Keyword calls only; prefill rows unpadded with stale, non-zero tails in token and page-table rows; decode
padded to ``max_batch_size`` with token 0, ``start_pos = -1`` and zero page-table rows in free slots;
requests join and leave between steps. Blocks come from one shuffled pool. For encoder-decoder models
(``cross_width`` set) each request also gets cross blocks from that same pool, and the calls carry the
cross tables (stale tails included), ``encoder_inputs`` (``None`` once a request's cross K/V is cached)
and ``encoder_lens`` (0 in decode padding rows). Image+text models (``vision``) get ``images`` instead (``None``
once cached, then the request's masks from its first prefill), return their masks from prefill, and get them
back at every decode, aligned with the padded rows. M-RoPE models (``mrope``: Qwen2.5-VL) get each row's images as
``pixel_values`` / ``image_grid_thw`` at prefill, which returns the rows' rope deltas, and every row's delta
(``rope_deltas_all_users``) at the first decode after a request joined, as TT vLLM's plugin sends them. Other
decoder-only image+text models (``pixel_values``: Gemma 3) get each row's images as ``pixel_values`` only.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tests.closeness import pcc


@dataclass
class Request:
    tokens: list[int]  # prompt, then every token fed so far
    prompt_len: int
    slot: int = -1
    blocks: list[int] = field(default_factory=list)
    computed: int = 0  # tokens whose KV is in the cache
    encoder_input: dict | None = None
    encoder_len: int = 0
    cross_blocks: list[int] = field(default_factory=list)
    image: object = None  # a PIL image (image+text models)
    masks: tuple = (None, None)  # (cross_attention_mask, full_text_row_masked_out_mask) from prefill
    pixel_values: list | None = None  # decoder-only image+text models: the images (M-RoPE: patches, with grids)
    grids: list | None = None
    rope_delta: int = 0  # from prefill


class VllmDriver:
    def __init__(self, model, kv_cache, *, max_batch_size: int, num_blocks: int, block_size: int, width: int,
                 seed: int = 0, cross_width: int = 0, vision: bool = False, enable_trace: bool = False,
                 mrope: bool = False, pixel_values: bool = False) -> None:
        self.model, self.kv_cache, self.cross_width, self.vision = model, kv_cache, cross_width, vision
        self.mrope, self.pixel_values, self.joined = mrope, pixel_values, False
        # Decode runs traced only (as TT vLLM serves it): its cache writes are the trace's own.
        self.enable_trace = enable_trace
        self.decode_steps = 0
        self.max_batch_size, self.block_size, self.width = max_batch_size, block_size, width
        self.rng = random.Random(seed)
        self.free_blocks = list(range(num_blocks))
        self.rng.shuffle(self.free_blocks)
        self.slots: list[Request | None] = [None] * max_batch_size
        self.stale_tokens = 1 + self.rng.randrange(100)
        self.remap: torch.Tensor | None = None  # moves since the last decode (see move)

    def _grow(self, request: Request, length: int) -> None:
        while len(request.blocks) * self.block_size < length:
            request.blocks.append(self.free_blocks.pop())

    def _stale_row(self, request: Request, own: list[int], width: int) -> list[int]:
        # Columns past the request's own blocks name other live requests' blocks (the runner never clears them).
        others = [b for r in self.slots if r is not None and r is not request for b in r.blocks + r.cross_blocks]
        return own + [self.rng.choice(others or [1]) for _ in range(width - len(own))]

    def _page_row(self, request: Request) -> list[int]:
        return self._stale_row(request, request.blocks, self.width)

    def _cross_row(self, request: Request) -> list[int]:
        return self._stale_row(request, request.cross_blocks, self.cross_width)

    def _token_row(self, request: Request, width: int) -> list[int]:
        return request.tokens + [self.stale_tokens] * (width - len(request.tokens))

    def add(self, request: Request, slot: int) -> None:
        assert self.slots[slot] is None
        request.slot = slot
        self.slots[slot] = request

    def move(self, request: Request, slot: int) -> None:
        """Condense the batch as TT vLLM's input batch does: the request moves to a free slot, and the next decode's
        ``slot_remap`` (row ``i`` takes slot ``remap[i]``'s state) says so."""
        assert self.slots[slot] is None
        if self.remap is None:
            self.remap = torch.arange(self.max_batch_size, dtype=torch.int32)
        self.remap[slot] = self.remap[request.slot]
        self.slots[request.slot], self.slots[slot] = None, request
        request.slot = slot

    def remove(self, request: Request) -> None:
        self.slots[request.slot] = None
        self.free_blocks.extend(request.blocks + request.cross_blocks)
        request.blocks, request.cross_blocks = [], []

    def prefill(self, requests: list[Request]) -> torch.Tensor:
        """Prefill each request's uncomputed tokens; logits ``[n, V]``."""
        for r in requests:
            self._grow(r, len(r.tokens))
        width = max(len(r.tokens) for r in requests)
        extra = {}
        if self.cross_width:
            encoder_inputs = [None if r.cross_blocks else r.encoder_input for r in requests]
            images = [[r.image] if r.image is not None and not r.cross_blocks else None for r in requests]
            for r in requests:
                while len(r.cross_blocks) * self.block_size < r.encoder_len:
                    r.cross_blocks.append(self.free_blocks.pop())
            extra = dict(cross_page_table=torch.tensor([self._cross_row(r) for r in requests], dtype=torch.int32))
            if self.vision:
                extra.update(images=images, cross_attention_masks=[r.masks[0] for r in requests])
            else:
                extra.update(encoder_inputs=encoder_inputs, encoder_lens=np.array([r.encoder_len for r in requests]))
        if self.mrope or self.pixel_values:
            extra = dict(pixel_values=[r.pixel_values if r.computed == 0 else None for r in requests])
        if self.mrope:
            extra.update(image_grid_thw=[r.grids if r.computed == 0 else None for r in requests])
        out = self.model.prefill_forward(
            tokens=torch.tensor([self._token_row(r, width) for r in requests], dtype=torch.int32),
            page_table=torch.tensor([self._page_row(r) for r in requests], dtype=torch.int32),
            kv_cache=self.kv_cache,
            prompt_lens=np.array([len(r.tokens) for r in requests]),
            start_pos=np.array([r.computed for r in requests], dtype=np.int32),
            enable_trace=False,
            empty_slots=[r.slot for r in requests],
            **extra,
        )
        if self.vision:
            out, masks, text_rows = out
            assert len(masks) == len(text_rows) == len(requests)
            for r, mask, text_row in zip(requests, masks, text_rows):
                r.masks = (mask, text_row)
        if self.mrope:
            out, deltas = out
            for r, delta in zip(requests, deltas.tolist()):
                r.rope_delta = delta
            self.joined = True
        for r in requests:
            r.computed = len(r.tokens)
        assert out.shape[:2] == (len(requests), 1)
        return out[:, 0]

    def decode(self, sampling_params=None, reset_batch: bool | None = None) -> dict[int, torch.Tensor]:
        """One decode step over every slot; logits per occupied slot, or with ``sampling_params`` the tokens the
        device sampled. ``reset_batch=False`` sends the rows as TT vLLM's async decode does in a steady batch: a
        step behind (the previous token and position), which the model must not use."""
        tokens = torch.zeros(self.max_batch_size, 1, dtype=torch.int32)
        start_pos = torch.full((self.max_batch_size,), -1, dtype=torch.int32)
        page_table = torch.zeros(self.max_batch_size, self.width, dtype=torch.int32)
        cross_table = torch.zeros(self.max_batch_size, self.cross_width, dtype=torch.int32)
        encoder_lens = torch.zeros(self.max_batch_size, dtype=torch.int32)
        for slot, r in enumerate(self.slots):
            if r is not None:
                self._grow(r, len(r.tokens))
                lag = 1 if reset_batch is False else 0
                tokens[slot, 0] = r.tokens[-1 - lag]
                start_pos[slot] = len(r.tokens) - 1 - lag
                page_table[slot] = torch.tensor(self._page_row(r))
                if self.cross_width:
                    cross_table[slot] = torch.tensor(self._cross_row(r))
                    encoder_lens[slot] = r.encoder_len
        extra = dict(cross_page_table=cross_table, encoder_lens=encoder_lens) if self.cross_width else {}
        if self.vision:
            masks = [(None, None) if r is None else r.masks for r in self.slots]
            extra = dict(cross_page_table=cross_table, cross_attention_masks=[m[0] for m in masks],
                         full_text_row_masked_out_mask=[m[1] for m in masks])
        if self.mrope and self.joined:
            extra = dict(rope_deltas_all_users=[0 if r is None else r.rope_delta for r in self.slots])
            self.joined = False
        if self.remap is not None:
            extra["slot_remap"], self.remap = self.remap, None
        raw = self.model.decode_forward(tokens=tokens, start_pos=start_pos, page_table=page_table,
                                        kv_cache=self.kv_cache, enable_trace=self.enable_trace, read_from_device=False,
                                        sampling_params=sampling_params, reset_batch=reset_batch, **extra)
        out = self.model.process_decode_output_host(raw, is_tokens=sampling_params is not None)
        if sampling_params is not None:
            out = out.reshape(-1, 1)
        self.decode_steps += 1
        assert out.shape[:2] == (self.max_batch_size, 1)
        for r in self.slots:
            if r is not None:
                r.computed = len(r.tokens)
        return {slot: out[slot, 0] for slot, r in enumerate(self.slots) if r is not None}

    def decode_as_prefill(self) -> dict[int, torch.Tensor]:
        """The same step delivered as a one-token prefill with ``start_pos > 0`` for each active request."""
        active = [r for r in self.slots if r is not None]
        logits = self.prefill(active)
        return {r.slot: row for r, row in zip(active, logits)}


def teacher_forced_steps(driver: VllmDriver, requests: list[Request], sequences: list[torch.Tensor], *,
                         slots: tuple[int, int, int], join_after: int, new_tokens: int, delivery: str,
                         check: Callable[[int, torch.Tensor], None]) -> None:
    """Feed three requests their reference continuations (``sequences[i]``, prompt included) step by step.

    Requests 0 and 1 start together in ``slots[0]`` and ``slots[1]``; request 2 joins in ``slots[2]`` once
    request 0 has been fed ``join_after`` tokens; each leaves after ``new_tokens``. Steps are decodes or, with
    ``delivery = "one-token-prefill"``, one-token prefills. ``check(i, logits)`` sees request ``i``'s logits of
    every prefill and step.
    """
    def feed(i: int) -> None:
        r = requests[i]
        r.tokens.append(int(sequences[i][len(r.tokens)]))

    driver.add(requests[0], slot=slots[0])
    driver.add(requests[1], slot=slots[1])
    for i, row in zip((0, 1), driver.prefill(requests[:2])):
        check(i, row)
    active = {0, 1}
    while active:
        for i in list(active):
            r = requests[i]
            if len(r.tokens) - r.prompt_len == new_tokens:  # finished: leaves the batch, its blocks return to the pool
                driver.remove(r)
                active.discard(i)
                continue
            feed(i)
        if len(requests[0].tokens) - requests[0].prompt_len == join_after and requests[2].computed == 0:
            driver.add(requests[2], slot=slots[2])  # joins mid-run
            check(2, driver.prefill([requests[2]])[0])
            active.add(2)
            feed(2)
        if not active:
            break
        step = driver.decode() if delivery == "decode" else driver.decode_as_prefill()
        for i in active:
            check(i, step[requests[i].slot])


def teacher_forced_pcc(driver: VllmDriver, requests: list[Request], sequences: list[torch.Tensor],
                       reference_logits: list[torch.Tensor], **steps: Any) -> tuple[list[float], set[int]]:
    """:func:`teacher_forced_steps` (``steps``: its keywords but ``check``) with each logits row scored against
    ``reference_logits[i]`` at its position: the PCCs, and every block (self and cross) a request owned. Every request
    must have computed its prompt and ``new_tokens``."""
    scores: list[float] = []
    owned: set[int] = set()

    def check(i: int, logits: torch.Tensor) -> None:
        r = requests[i]
        scores.append(pcc(logits, reference_logits[i][len(r.tokens) - 1]))
        owned.update(r.blocks + r.cross_blocks)

    teacher_forced_steps(driver, requests, sequences, check=check, **steps)
    assert all(r.computed == r.prompt_len + steps["new_tokens"] for r in requests)
    return scores, owned


def fill_nan(kv: list[list[Any]]) -> None:
    """Every KV block NaN on every chip (host-backend tensors hold their values in ``.value``, a mesh's per chip in
    ``.shards``): a block read by mistake shows in the logits, and :func:`assert_unowned_blocks_untouched` finds stray
    writes."""
    for replica in kv:
        for layer in replica:
            for t in layer:
                for chip in _chips(t):
                    chip.value.fill_(float("nan"))


def assert_unowned_blocks_untouched(kv: list[list[Any]], ever_owned: set[int], num_blocks: int) -> None:
    """Blocks no request ever owned still hold the NaN they started with, in every layer's K and V."""
    never_owned = sorted(set(range(num_blocks)) - ever_owned)
    assert never_owned, "the test should leave some blocks unused"
    for layer in kv[0]:
        for t in layer:
            for chip in _chips(t):
                assert torch.isnan(chip.value[never_owned]).all(), "a block no request owned was written"


def _chips(t: Any) -> list[Any]:
    """A host-backend tensor's per-chip tensors (itself on one chip)."""
    return getattr(t, "shards", [t])


def greedy_rows(driver: VllmDriver, requests: list[Request], slots: Sequence[int],
                new_tokens: int) -> list[list[torch.Tensor]]:
    """Free-running greedy: ``requests`` join at ``slots``, prefill together, then decode, each row's argmax fed back,
    until each has ``new_tokens`` (appended to its ``tokens``). Each request's logits row of every generated token."""
    for slot, r in zip(slots, requests):
        driver.add(r, slot)
    rows = [[row] for row in driver.prefill(requests)]
    for r, own in zip(requests, rows):
        r.tokens.append(int(own[-1].argmax()))
    for _ in range(new_tokens - 1):
        step = driver.decode()
        for r, own in zip(requests, rows):
            own.append(step[r.slot])
            r.tokens.append(int(own[-1].argmax()))
    return rows
