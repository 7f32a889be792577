"""The persistent input batch against the seed's worked example, a per-token reference and the TT vLLM
contract (research/contract.md sections 2-3)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models.engine.input_batch import InputBatch, StepInputs, page_table_width


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# The seed's worked example (seeds/prepare-inputs-for-model-forwarding.md, "Go through details"): block size 2,
# 10 tokens per step, max model length 12, prompts of 3, 2 and 8 tokens. Its token ids are names, T_i_j; the
# seed's table calls request 2's tokens from position 2 on T_3_j (a naming slip: they are request 2's prompt,
# there is no request 3), and its Input IDs use the same names, so the names are kept as written.
def T(i: int, j: int) -> int:
    return 100 * (i + 1) + j


SEED_PROMPTS = {
    "0": [T(0, 0), T(0, 1), T(0, 2)],
    "1": [T(1, 0), T(1, 1)],
    "2": [T(2, 0), T(2, 1), T(3, 2), T(3, 3), T(3, 4), T(3, 5), T(3, 6), T(3, 7)],
}
SEED_BLOCKS = {"0": [1, 2], "1": [3], "2": [4, 5, 6]}


def seed_batch() -> InputBatch:
    batch = InputBatch(max_num_seqs=4, max_model_len=12, block_size=2, max_blocks_per_seq=12 // 2)
    for req_id, prompt in SEED_PROMPTS.items():
        batch.add_request(req_id, prompt, SEED_BLOCKS[req_id])
    return batch


def seed_step_2(batch: InputBatch, step_1: StepInputs) -> StepInputs:
    """Step 1 ran; T_0_3 and T_1_2 were sampled; blocks 7 and 8 went to requests 1 and 2."""
    batch.advance(step_1)
    batch.append_token("0", T(0, 3))
    batch.append_token("1", T(1, 2))
    batch.append_blocks("1", [7])
    batch.append_blocks("2", [8])
    return batch.prepare({"0": 1, "1": 1, "2": 3})


def test_seed_step_1_all_prefill_with_a_chunk():
    batch = seed_batch()
    assert batch.block_table[:4].tolist() == [[1, 2, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0], [4, 5, 6, 0, 0, 0],
                                              [0, 0, 0, 0, 0, 0]]
    step = batch.prepare({"0": 3, "1": 2, "2": 5})

    assert step.request_indices.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2, 2]
    assert step.positions.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 4]
    assert step.token_indices.tolist() == [0, 1, 2, 12, 13, 24, 25, 26, 27, 28]
    assert step.input_ids.tolist() == [T(0, 0), T(0, 1), T(0, 2), T(1, 0), T(1, 1), T(2, 0), T(2, 1), T(3, 2),
                                       T(3, 3), T(3, 4)]
    assert step.block_table_indices.tolist() == [0, 0, 1, 6, 6, 12, 12, 13, 13, 14]
    assert step.block_numbers.tolist() == [1, 1, 2, 3, 3, 4, 4, 5, 5, 6]
    assert step.block_offsets.tolist() == [0, 1, 0, 0, 1, 0, 1, 0, 1, 0]
    assert step.slot_mapping.tolist() == [2, 3, 4, 6, 7, 8, 9, 10, 11, 12]
    assert step.query_start_loc.tolist() == [0, 3, 5, 10]
    assert step.seq_lens.tolist() == [3, 2, 5]
    assert step.num_computed_tokens.tolist() == [0, 0, 0]
    assert step.num_reqs == 3
    # The seed lists "number of tokens" as [3, 2, 5] here though it defines it as the step's total.
    assert step.num_scheduled_tokens.tolist() == [3, 2, 5]
    assert step.num_tokens == 10
    assert step.max_query_len == 5


def test_seed_step_2_decode_and_chunked_prefill():
    batch = seed_batch()
    step = seed_step_2(batch, batch.prepare({"0": 3, "1": 2, "2": 5}))
    assert batch.token_ids[:3, :8].tolist() == [
        [T(0, 0), T(0, 1), T(0, 2), T(0, 3), 0, 0, 0, 0],
        [T(1, 0), T(1, 1), T(1, 2), 0, 0, 0, 0, 0],
        [T(2, 0), T(2, 1), T(3, 2), T(3, 3), T(3, 4), T(3, 5), T(3, 6), T(3, 7)],
    ]
    assert batch.block_table[:4].tolist() == [[1, 2, 0, 0, 0, 0], [3, 7, 0, 0, 0, 0], [4, 5, 6, 8, 0, 0],
                                              [0, 0, 0, 0, 0, 0]]

    assert step.request_indices.tolist() == [0, 1, 2, 2, 2]
    assert step.positions.tolist() == [3, 2, 5, 6, 7]
    assert step.token_indices.tolist() == [3, 14, 29, 30, 31]
    assert step.input_ids.tolist() == [T(0, 3), T(1, 2), T(3, 5), T(3, 6), T(3, 7)]
    assert step.block_table_indices.tolist() == [1, 7, 14, 15, 15]
    assert step.block_numbers.tolist() == [2, 7, 6, 8, 8]
    assert step.block_offsets.tolist() == [1, 0, 1, 0, 1]
    assert step.slot_mapping.tolist() == [5, 14, 13, 16, 17]
    assert step.query_start_loc.tolist() == [0, 1, 2, 5]
    assert step.seq_lens.tolist() == [4, 3, 8]
    assert step.num_computed_tokens.tolist() == [3, 2, 5]
    assert step.num_reqs == 3
    assert step.num_scheduled_tokens.tolist() == [1, 1, 3]
    assert step.max_query_len == 3


def test_seed_steps_as_prefill_arguments():
    """The seed's steps as TT vLLM hands them to ``prefill_forward``: unpadded rows in scheduling order,
    ``tokens`` as wide as the longest chunk end, chunk starts and ends, the rows' page tables and slots."""
    batch = seed_batch()
    step_1 = batch.prepare({"0": 3, "1": 2, "2": 5})
    kw = batch.prefill_kwargs(step_1)
    assert set(kw) == {"tokens", "prompt_lens", "start_pos", "page_table", "empty_slots"}
    assert kw["tokens"].dtype == torch.int32 and kw["page_table"].dtype == torch.int32
    assert isinstance(kw["prompt_lens"], np.ndarray) and isinstance(kw["start_pos"], np.ndarray)
    assert kw["start_pos"].dtype == np.int32
    assert kw["tokens"].tolist() == [[T(0, 0), T(0, 1), T(0, 2), 0, 0], [T(1, 0), T(1, 1), 0, 0, 0],
                                     [T(2, 0), T(2, 1), T(3, 2), T(3, 3), T(3, 4)]]
    assert kw["prompt_lens"].tolist() == [3, 2, 5]
    assert kw["start_pos"].tolist() == [0, 0, 0]
    assert kw["page_table"].tolist() == [[1, 2, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0], [4, 5, 6, 0, 0, 0]]
    assert kw["empty_slots"] == [0, 1, 2]

    kw = batch.prefill_kwargs(seed_step_2(batch, step_1))
    assert kw["tokens"].shape == (3, 8)
    assert kw["tokens"][2].tolist() == SEED_PROMPTS["2"]
    assert kw["prompt_lens"].tolist() == [4, 3, 8]
    assert kw["start_pos"].tolist() == [3, 2, 5]
    assert kw["page_table"].tolist() == [[1, 2, 0, 0, 0, 0], [3, 7, 0, 0, 0, 0], [4, 5, 6, 8, 0, 0]]


def test_seed_step_2_is_no_decode_step():
    """Request 2 is still prefilling, so TT vLLM could not send this step to ``decode_forward``."""
    batch = seed_batch()
    seed_step_2(batch, batch.prepare({"0": 3, "1": 2, "2": 5}))
    with pytest.raises(ValueError, match="not a decode step for \\['2'\\]"):
        batch.prepare_decode(["0", "1", "2"])


def test_prefill_rows_follow_scheduling_order_and_keep_stale_tails():
    batch = InputBatch(max_num_seqs=3, max_model_len=16, block_size=4, max_blocks_per_seq=4)
    batch.add_request("old", list(range(1, 15)), [9, 8, 7, 6])
    assert batch.remove_request("old") == 0
    assert batch.token_ids[0, :14].tolist() == list(range(1, 15))  # removal clears nothing
    batch.add_request("long", [50] * 12, [1, 2, 3], slot=2)
    assert batch.add_request("short", [60, 61, 62], [4]) == 0

    kw = batch.prefill_kwargs(batch.prepare({"long": 12, "short": 3}))
    assert kw["empty_slots"] == [2, 0]
    assert kw["tokens"].shape == (2, 12)
    # Past its own 3 tokens and 1 block, row 0 still holds the earlier request's tokens and blocks.
    assert kw["tokens"][1].tolist() == [60, 61, 62] + list(range(4, 13))
    assert kw["page_table"].tolist() == [[1, 2, 3, 0], [4, 8, 7, 6]]
    assert kw["prompt_lens"].tolist() == [12, 3]


def test_prefix_cache_hit_starts_at_the_cached_length():
    batch = InputBatch(max_num_seqs=2, max_model_len=16, block_size=4, max_blocks_per_seq=4)
    batch.add_request("r", list(range(10, 20)), [5, 6, 7], num_computed_tokens=8)
    step = batch.prepare({"r": 2})
    assert step.positions.tolist() == [8, 9]
    assert step.input_ids.tolist() == [18, 19]
    assert step.slot_mapping.tolist() == [28, 29]
    kw = batch.prefill_kwargs(step)
    assert kw["start_pos"].tolist() == [8] and kw["prompt_lens"].tolist() == [10]


def decoding_batch(max_cross_blocks: int = 0) -> tuple[InputBatch, StepInputs]:
    """Four slots: ``a`` decodes in slot 3 (over a finished request's row), ``b`` in slot 1, ``idle`` (slot 0)
    is not scheduled, slot 2 is free."""
    batch = InputBatch(max_num_seqs=4, max_model_len=8, block_size=2, max_blocks_per_seq=4,
                       max_cross_blocks=max_cross_blocks)
    cross = dict(cross_block_ids=[30, 31], encoder_len=3) if max_cross_blocks else {}
    batch.add_request("idle", [1, 2, 3], [10, 11], slot=0, **cross)
    batch.add_request("gone", [4, 5, 6, 7, 8], [12, 13, 18], slot=3, **cross)
    batch.remove_request("gone")
    batch.add_request("a", [21, 22, 23], [14, 15], slot=3, **(dict(cross_block_ids=[32], encoder_len=2)
                                                               if max_cross_blocks else {}))
    batch.add_request("b", [31, 32], [16], slot=1, **cross)
    batch.advance(batch.prepare({"a": 3, "b": 2, "idle": 3}))
    batch.append_token("a", 24)
    batch.append_token("b", 33)
    batch.append_blocks("b", [17])
    return batch, batch.prepare_decode(["a", "b"])


def test_decode_is_padded_to_max_num_seqs_with_start_pos_minus_one():
    batch, step = decoding_batch()
    kw = batch.decode_kwargs(step)
    assert set(kw) == {"tokens", "start_pos", "page_table"}
    assert all(t.dtype == torch.int32 for t in kw.values())
    assert kw["tokens"].tolist() == [[0], [33], [0], [24]]
    assert kw["start_pos"].tolist() == [-1, 2, -1, 3]
    # Slot 3 keeps the finished request's third block past ``a``'s own two.
    assert kw["page_table"].tolist() == [[0, 0, 0, 0], [16, 17, 0, 0], [0, 0, 0, 0], [14, 15, 18, 0]]


def test_decode_encoder_decoder_rows():
    batch, step = decoding_batch(max_cross_blocks=3)
    kw = batch.decode_kwargs(step)
    assert set(kw) == {"tokens", "start_pos", "page_table", "cross_page_table", "encoder_lens"}
    assert kw["cross_page_table"].dtype == torch.int32 and kw["encoder_lens"].dtype == torch.int32
    assert kw["cross_page_table"].tolist() == [[0, 0, 0], [30, 31, 0], [0, 0, 0], [32, 31, 0]]  # a: stale tail
    assert kw["encoder_lens"].tolist() == [0, 3, 0, 2]
    assert kw["start_pos"].tolist() == [-1, 2, -1, 3]


def test_encoder_decoder_prefill_passes_encoder_inputs_through():
    batch = InputBatch(max_num_seqs=2, max_model_len=8, block_size=2, max_blocks_per_seq=4, max_cross_blocks=2)
    batch.add_request("x", [1, 2], [3], slot=1, cross_block_ids=[5, 6], encoder_len=4)
    batch.add_request("y", [7], [4], cross_block_ids=[8], encoder_len=1)
    features = object()
    step = batch.prepare({"x": 2, "y": 1})
    kw = batch.prefill_kwargs(step, encoder_inputs=[features, None])
    assert kw["encoder_inputs"][0] is features and kw["encoder_inputs"][1] is None
    assert kw["cross_page_table"].dtype == torch.int32
    assert kw["cross_page_table"].tolist() == [[5, 6], [8, 0]]
    assert kw["encoder_lens"].dtype == np.int32 and kw["encoder_lens"].tolist() == [4, 1]
    assert kw["empty_slots"] == [1, 0]
    with pytest.raises(ValueError, match="one encoder_inputs entry per row"):
        batch.prefill_kwargs(step)


def test_page_table_width():
    assert page_table_width(max_model_len=12, block_size=2, num_blocks=100) == 6
    assert page_table_width(max_model_len=13, block_size=2, num_blocks=100) == 7
    assert page_table_width(max_model_len=4096, block_size=64, num_blocks=40) == 40


@pytest.mark.parametrize("schedule, match", [
    ({"r": 6}, "6 tokens scheduled after 1 computed, but it has 5 tokens"),  # tokens not in the table yet
    ({"r": 4}, "and 2 blocks of 2"),  # position 4 has no block of its own
    ({"r": 0}, "0 tokens scheduled"),
])
def test_prepare_refuses_tokens_without_ids_or_blocks(schedule, match):
    batch = InputBatch(max_num_seqs=2, max_model_len=8, block_size=2, max_blocks_per_seq=4)
    batch.add_request("r", [1, 2, 3, 4, 5], [7, 8], num_computed_tokens=1)
    with pytest.raises(ValueError, match=match):
        batch.prepare(schedule)
    with pytest.raises(KeyError, match="'q' is not in the batch"):
        batch.prepare({"q": 1})


def test_row_management_checks():
    batch = InputBatch(max_num_seqs=2, max_model_len=4, block_size=2, max_blocks_per_seq=2)
    batch.add_request("a", [1], [1], slot=1)
    with pytest.raises(ValueError, match="slot 1 holds 'a'"):
        batch.add_request("b", [1], [2], slot=1)
    with pytest.raises(ValueError, match="already in the batch"):
        batch.add_request("a", [1], [2])
    assert batch.add_request("b", [1], [2]) == 0
    with pytest.raises(ValueError, match="all 2 slots are taken"):
        batch.add_request("c", [1], [3])
    with pytest.raises(ValueError, match="cross blocks or encoder_len in a decoder-only batch"):
        batch.add_request("c", [1], [3], cross_block_ids=[4], encoder_len=2)
    for token in (2, 3, 4):
        batch.append_token("a", token)
    with pytest.raises(ValueError, match="at max_model_len"):
        batch.append_token("a", 5)
    batch.append_blocks("a", [5])
    with pytest.raises(ValueError, match="3 blocks > 2"):
        batch.append_blocks("a", [6])
    with pytest.raises(KeyError):
        batch.remove_request("c")

    enc_dec = InputBatch(max_num_seqs=1, max_model_len=4, block_size=2, max_blocks_per_seq=2, max_cross_blocks=2)
    with pytest.raises(ValueError, match="1 cross blocks, need 2..2 for encoder_len 3"):
        enc_dec.add_request("a", [1], [1], cross_block_ids=[2], encoder_len=3)
    with pytest.raises(ValueError, match="needs cross blocks and encoder_len > 0"):
        enc_dec.add_request("a", [1], [1])


class Shadow:
    """The per-token reference: each request's own tokens and blocks as Python lists, and a copy of each
    persistent row kept by writing exactly what the batch is told to write."""

    def __init__(self, batch: InputBatch) -> None:
        self.batch = batch
        self.requests: dict[str, dict] = {}
        self.token_rows = [[0] * batch.max_model_len for _ in range(batch.max_num_seqs)]
        self.block_rows = [[0] * batch.max_blocks_per_seq for _ in range(batch.max_num_seqs)]
        self.cross_rows = [[0] * batch.max_cross_blocks for _ in range(batch.max_num_seqs)]

    def add(self, req_id: str, tokens: list[int], blocks: list[int], slot: int, computed: int,
            cross: list[int] | None, encoder_len: int) -> None:
        row = self.batch.add_request(req_id, tokens, blocks, slot=slot, cross_block_ids=cross,
                                     encoder_len=encoder_len, num_computed_tokens=computed)
        assert row == slot
        self.requests[req_id] = dict(tokens=list(tokens), blocks=list(blocks), row=row, computed=computed,
                                     cross=cross or [], encoder_len=encoder_len)
        self.token_rows[row][:len(tokens)] = tokens
        self.block_rows[row][:len(blocks)] = blocks
        self.cross_rows[row][:len(cross or [])] = cross or []

    def append_token(self, req_id: str, token: int) -> None:
        self.batch.append_token(req_id, token)
        r = self.requests[req_id]
        self.token_rows[r["row"]][len(r["tokens"])] = token
        r["tokens"].append(token)

    def append_blocks(self, req_id: str, blocks: list[int]) -> None:
        self.batch.append_blocks(req_id, blocks)
        r = self.requests[req_id]
        self.block_rows[r["row"]][len(r["blocks"]):len(r["blocks"]) + len(blocks)] = blocks
        r["blocks"].extend(blocks)

    def expected_step(self, schedule: dict[str, int]) -> dict[str, list]:
        bs, m, k = self.batch.block_size, self.batch.max_model_len, self.batch.max_blocks_per_seq
        out: dict[str, list] = {name: [] for name in (
            "request_indices", "positions", "token_indices", "input_ids", "block_table_indices", "block_numbers",
            "block_offsets", "slot_mapping", "seq_lens", "num_computed_tokens")}
        out["query_start_loc"] = [0]
        for req_id, n in schedule.items():
            r = self.requests[req_id]
            for j in range(n):
                pos = r["computed"] + j
                block = r["blocks"][pos // bs]
                out["request_indices"].append(r["row"])
                out["positions"].append(pos)
                out["token_indices"].append(r["row"] * m + pos)
                out["input_ids"].append(r["tokens"][pos])
                out["block_table_indices"].append(r["row"] * k + pos // bs)
                out["block_numbers"].append(block)
                out["block_offsets"].append(pos % bs)
                out["slot_mapping"].append(block * bs + pos % bs)
            out["query_start_loc"].append(out["query_start_loc"][-1] + n)
            out["seq_lens"].append(r["computed"] + n)
            out["num_computed_tokens"].append(r["computed"])
        return out


def check_prefill_kwargs(shadow: Shadow, step: StepInputs, schedule: dict[str, int]) -> None:
    batch = shadow.batch
    ends = [shadow.requests[r]["computed"] + n for r, n in schedule.items()]
    rows = [shadow.requests[r]["row"] for r in schedule]
    encoder_inputs = [object() for _ in rows] if batch.is_encoder_decoder else None
    kw = batch.prefill_kwargs(step, encoder_inputs=encoder_inputs)
    assert kw["tokens"].dtype == torch.int32 and kw["page_table"].dtype == torch.int32
    assert kw["tokens"].tolist() == [shadow.token_rows[row][:max(ends)] for row in rows]
    assert kw["page_table"].tolist() == [shadow.block_rows[row] for row in rows]
    assert kw["prompt_lens"].tolist() == ends
    assert kw["start_pos"].dtype == np.int32
    assert kw["start_pos"].tolist() == [shadow.requests[r]["computed"] for r in schedule]
    assert kw["empty_slots"] == rows
    if batch.is_encoder_decoder:
        assert kw["cross_page_table"].tolist() == [shadow.cross_rows[row] for row in rows]
        assert kw["encoder_lens"].tolist() == [shadow.requests[r]["encoder_len"] for r in schedule]
        assert all(a is b for a, b in zip(kw["encoder_inputs"], encoder_inputs))


def check_decode_kwargs(shadow: Shadow, schedule: dict[str, int]) -> None:
    batch = shadow.batch
    b = batch.max_num_seqs
    tokens, start_pos = [[0] for _ in range(b)], [-1] * b
    page_table = [[0] * batch.max_blocks_per_seq for _ in range(b)]
    cross_table, encoder_lens = [[0] * batch.max_cross_blocks for _ in range(b)], [0] * b
    for req_id in schedule:
        r = shadow.requests[req_id]
        row = r["row"]
        tokens[row], start_pos[row] = [r["tokens"][-1]], len(r["tokens"]) - 1
        page_table[row], cross_table[row], encoder_lens[row] = shadow.block_rows[row], shadow.cross_rows[row], \
            r["encoder_len"]
    step = batch.prepare_decode(list(schedule))
    assert step.seq_lens.tolist() == [len(shadow.requests[r]["tokens"]) for r in schedule]
    kw = batch.decode_kwargs(step)
    assert kw["tokens"].tolist() == tokens
    assert kw["start_pos"].tolist() == start_pos
    assert kw["page_table"].tolist() == page_table
    if batch.is_encoder_decoder:
        assert kw["cross_page_table"].tolist() == cross_table
        assert kw["encoder_lens"].tolist() == encoder_lens


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_steps_match_a_per_token_reference(data):
    """Requests join (at chosen slots, some with a cached prefix) and leave, sample tokens and get blocks;
    each step schedules chunks or single decode tokens in a random order. Every per-step array and every
    contract argument equals what the per-token reference gives."""
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="values seed"))
    block_size = data.draw(st.integers(1, 5), label="block_size")
    max_num_seqs = data.draw(st.integers(1, 5), label="max_num_seqs")
    max_model_len = data.draw(st.integers(1, 24), label="max_model_len")
    max_cross_blocks = data.draw(st.sampled_from([0, 0, 1, 3]), label="max_cross_blocks")
    width = page_table_width(max_model_len, block_size, num_blocks=10**6)
    batch = InputBatch(max_num_seqs, max_model_len, block_size, width, max_cross_blocks)
    shadow = Shadow(batch)
    pool = list(range(1, 1 + max_num_seqs * (width + max_cross_blocks)))
    rng.shuffle(pool)

    def release(req_id: str) -> None:
        batch.remove_request(req_id)
        r = shadow.requests.pop(req_id)
        pool.extend(r["blocks"] + r["cross"])

    for step_index in range(data.draw(st.integers(1, 12), label="steps")):
        for req_id in list(shadow.requests):
            if data.draw(st.integers(0, 2), label="finish?") == 0:
                release(req_id)
        free = [row for row in range(max_num_seqs) if batch.req_ids[row] is None]
        for slot in data.draw(st.lists(st.sampled_from(free), unique=True), label="join") if free else []:
            tokens = [rng.randrange(1, 1000) for _ in range(data.draw(st.integers(1, max_model_len), label="len"))]
            computed = block_size * data.draw(st.integers(0, (len(tokens) - 1) // block_size), label="cached")
            blocks = [pool.pop() for _ in range(cdiv(computed, block_size))]
            encoder_len = data.draw(st.integers(1, max_cross_blocks * block_size), label="enc") \
                if max_cross_blocks else 0
            cross = [pool.pop() for _ in range(cdiv(encoder_len, block_size))] if max_cross_blocks else None
            shadow.add(f"r{step_index}.{slot}", tokens, blocks, slot, computed, cross, encoder_len)
        for req_id, r in list(shadow.requests.items()):
            if r["computed"] == len(r["tokens"]):
                if len(r["tokens"]) == max_model_len:
                    release(req_id)
                else:
                    shadow.append_token(req_id, rng.randrange(1, 1000))  # "sampled"

        remaining = {req_id: len(r["tokens"]) - r["computed"] for req_id, r in shadow.requests.items()}
        decode = data.draw(st.booleans(), label="decode step?")
        candidates = [r for r, left in remaining.items() if left == 1 or not decode]
        if not candidates:
            continue
        order = data.draw(st.permutations(candidates), label="order")
        chosen = order[:data.draw(st.integers(1, len(order)), label="how many")]
        schedule = {r: 1 if decode else data.draw(st.integers(1, remaining[r]), label="chunk") for r in chosen}
        for req_id, n in schedule.items():
            r = shadow.requests[req_id]
            shadow.append_blocks(req_id, [pool.pop() for _ in range(cdiv(r["computed"] + n, block_size)
                                                                     - len(r["blocks"]))])

        step = batch.prepare(schedule)
        expected = shadow.expected_step(schedule)
        for name, values in expected.items():
            assert getattr(step, name).tolist() == values, name
        assert step.req_ids == list(schedule)
        assert step.num_scheduled_tokens.tolist() == list(schedule.values())
        assert step.max_query_len == max(schedule.values())
        assert step.num_tokens == sum(schedule.values())
        check_prefill_kwargs(shadow, step, schedule)
        if all(n == remaining[r] == 1 for r, n in schedule.items()):
            check_decode_kwargs(shadow, schedule)
        else:
            with pytest.raises(ValueError, match="not a decode step"):
                batch.prepare_decode(list(schedule))
        batch.advance(step)
        for req_id, n in schedule.items():
            shadow.requests[req_id]["computed"] += n
