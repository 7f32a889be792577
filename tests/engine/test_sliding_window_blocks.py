"""Sliding-window layers hold only their window (host backend, tiny random Gemma 3 text: window 16, blocks of 32).

With ``free_out_of_window_blocks`` the engine keeps a block table per KV-cache group (the sliding layers' and the
global layers') and frees the sliding group's blocks that fall out of the window: the greedy tokens of several
requests (prompts and outputs passing several windows, chunked prefill, one request preempted and recomputed) equal
those of the engine keeping every block, while a decoding sequence's sliding table holds ``ceil((window - 1) / bs) + 1``
blocks; every block is free at the end. The model itself: teacher-forced logits through per-group page tables whose
dropped entries name a block full of other values equal, bit for bit, those through one table (the sliding layers
never read what they dropped).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tt_models import LLM
from tt_models.engine.kv_blocks import NULL_BLOCK
from tt_models.engine.sampling import SamplingParams
from tt_models.models.gemma3.generator import Gemma3ForCausalLM
from tt_models.testing.gemma3 import tiny_gemma3_text

WINDOW, BLOCK = 16, 32
HELD = -(-(WINDOW - 1) // BLOCK) + 1  # the sliding table of a decoding sequence: 2 blocks
PROMPTS = (5, 40, 100, 70)
NEW_TOKENS = 100


def _model(seed: int = 0):
    hf = tiny_gemma3_text(seed)
    hf.config.sliding_window = WINDOW
    return hf


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("gemma3-window")
    _model().save_pretrained(path)
    return str(path)


def _generate(checkpoint: str, free: bool, num_kv_blocks: int | None = None) -> tuple[dict, object, list]:
    """Greedy tokens of every prompt, the engine, and for each sequence each decode step schedules, its tokens with
    K/V once the step runs and the blocks it holds per group then."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 490, (n,), generator=g).tolist() for n in PROMPTS]
    llm = LLM(checkpoint, backend="host", max_num_seqs=4, max_model_len=256, block_size=BLOCK,
              max_num_batched_tokens=64, num_kv_blocks=num_kv_blocks, free_out_of_window_blocks=free)
    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), {"prompt_token_ids": prompt}, params)
    tokens, held = {}, []
    scheduler, schedule = engine.scheduler, engine.scheduler.schedule

    def recorded_schedule():
        out = schedule()
        if not out.is_prefill:
            held.extend((seq.num_computed + 1, scheduler.kv.blocks_held(seq.seq_id)) for seq, _ in out.scheduled)
        return out

    scheduler.schedule = recorded_schedule
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                tokens[out.request_id] = out.outputs[0].token_ids
    llm.close()
    return tokens, engine, held


def test_freeing_out_of_window_blocks_keeps_the_tokens(checkpoint):
    kept, kept_engine, _ = _generate(checkpoint, free=False)
    freed, engine, held = _generate(checkpoint, free=True)
    assert kept_engine.runner.kv_groups is None
    assert engine.runner.kv_windows == (WINDOW, None)  # layer 0 is a sliding one: its group comes first, as in vLLM
    assert freed == kept and len(freed) == len(PROMPTS)
    # A decoding sequence's global table holds every block; its sliding one the window's, once past it.
    for num_tokens, (sliding, full) in held:
        assert full == -(-num_tokens // BLOCK)
        assert sliding == min(full, HELD)
    assert max(full for _, (_, full) in held) == -(-(PROMPTS[2] + NEW_TOKENS) // BLOCK)
    kv = engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks  # (the null block is not one of them)


def test_preempted_request_under_window_freeing(checkpoint):
    """A pool too small for every request at once: one is preempted (recomputed), the tokens stay."""
    kept, _, _ = _generate(checkpoint, free=False)
    freed, engine, _ = _generate(checkpoint, free=True, num_kv_blocks=22)
    assert engine.scheduler.num_preemptions > 0
    assert freed == kept
    kv = engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks


def test_per_group_page_tables_read_no_dropped_block(host_device):
    """Teacher-forced logits (a 100-token prompt, then 40 decode steps) through per-group page tables, the sliding
    table's dropped blocks pointing at block 0 filled with other K/V, equal those through one table bit for bit."""
    hf = _model()
    model = Gemma3ForCausalLM.from_state_dict(hf.config, hf.state_dict(), host_device, 2, max_seq_len=256)
    groups = model.models[0].kv_groups
    heads, head_dim = model.models[0].kv_geometry
    tokens = torch.randint(3, 490, (1, 140), generator=torch.Generator().manual_seed(0))
    full = torch.tensor([[1, 2, 3, 4, 5]], dtype=torch.int32)
    sliding = torch.tensor([[6, 7, 8, 9, 10]], dtype=torch.int32)

    def run(per_group: bool) -> list[torch.Tensor]:
        shape = (12, heads, BLOCK, head_dim)
        # Per group, one layer of each group shares a K/V pair (the engine's layout); one table, a pair per layer.
        kv = (model.allocate_kv_cache_per_layer([(shape, torch.bfloat16, j) for j in groups.shared_tensors])
              if per_group else model.allocate_kv_cache(shape, torch.bfloat16, groups.num_layers))
        other = torch.randn(groups.num_layers, 2, 1, heads, BLOCK, head_dim, generator=torch.Generator().manual_seed(2))
        model.write_kv_blocks(kv, [NULL_BLOCK], [other * 3])

        def tables(position: int, rows: int) -> dict:
            if not per_group:
                return {}
            table = sliding.clone()
            table[0, : max(0, position // BLOCK * BLOCK - WINDOW + 1) // BLOCK] = NULL_BLOCK
            return {"page_tables_per_group": [table.repeat(rows, 1), full.repeat(rows, 1)]}

        out = [model.prefill_forward(tokens=tokens, page_table=full, kv_cache=kv, prompt_lens=np.array([100]),
                                     **tables(0, 1))[0, 0]]
        for position in range(100, 140):
            out.append(model.decode_forward(tokens=tokens[:, position:position + 1].repeat(2, 1),
                                            start_pos=torch.tensor([position, -1]), page_table=full.repeat(2, 1),
                                            kv_cache=kv, **tables(position, 2))[0, 0])
        return out

    one_table, per_group = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(one_table, per_group))
