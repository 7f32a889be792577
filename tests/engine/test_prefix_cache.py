"""Automatic prefix caching: block keys, the block manager's cached blocks, and the engine's outputs with hits.

The engine runs :class:`PagedHashModel`, whose logits hash every token it reads back through the page table: a cached
block holding anything but the prompt's tokens (registered before its prefill wrote it, reused for other tokens while
still listed, written by a later request) changes the next token, so outputs equal to each request's solo run mean
the hits were right. Solo runs use a fresh engine: nothing is cached there.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_models.engine.config import EngineConfig
from tt_models.engine.kv_blocks import KVBlockManager
from tt_models.engine.prefix_cache import block_keys
from tt_models.engine.scheduler import Scheduler

from .paged_hash_model import VOCAB
from .test_engine_loop import BLOCK, DECODE_MODES, fitting, make_engine, params, run, solo


def test_block_keys_name_the_whole_prefix():
    a, b, c = [1] * BLOCK, [2] * BLOCK, [3] * BLOCK
    keys = block_keys(a + b + [5] * (BLOCK - 1), BLOCK)
    assert len(keys) == 2  # the partial block has none
    assert block_keys(a + b, BLOCK) == keys
    other = block_keys(c + b, BLOCK)
    assert other[1] != keys[1]  # the same tokens after another block
    assert len(set(keys + other)) == 4


def test_a_computed_prompt_is_found_by_the_next_one_but_its_last_token():
    kv = KVBlockManager(12, BLOCK, prefix_caching=True)
    keys = block_keys(range(100), BLOCK)  # 3 full blocks and 4 tokens
    assert kv.allocate("a", [0], 100, keys=keys) == 0
    assert kv.allocate("b", [1], 100, keys=keys) == 0  # "a" is not computed yet
    kv.cache_computed(0, 70)  # a first chunk: two full blocks
    assert kv.num_held_hits(keys, 100) == 2
    assert kv.allocate("c", [2], 100, keys=keys) == 2 * BLOCK
    kv.cache_computed(0, 100)
    assert kv.allocate("d", [3], 100, keys=keys) == 3 * BLOCK
    assert kv.self_table(3)[:3] == kv.self_table(0)[:3] and kv.self_table(3)[3] != kv.self_table(0)[3]
    assert kv.num_free_blocks == 12 - 4 - 4 - 2 - 1
    # A prompt of exactly three blocks: the block holding its last token is computed, not taken.
    assert kv.allocate("e", [4], 96, keys=keys) == 2 * BLOCK
    for seq_id in range(5):
        kv.free(seq_id)
    assert kv.num_free_blocks == 12  # cached blocks are free blocks
    assert kv.allocate("f", [5], 100, keys=keys) == 3 * BLOCK


def test_freed_cached_blocks_are_taken_last_and_forgotten_once_taken():
    kv = KVBlockManager(6, BLOCK, prefix_caching=True)
    keys = block_keys(range(65), BLOCK)
    kv.allocate("a", [0], 65, keys=keys)
    kv.cache_computed(0, 65)
    cached = kv.self_table(0)[:2]
    kv.free(0)
    kv.allocate("b", [1], 3 * BLOCK)  # three blocks no one cached come first
    assert not set(kv.self_table(1)) & set(cached)
    assert kv.allocate("c", [2], 65, keys=keys) == 2 * BLOCK and kv.self_table(2)[:2] == cached
    kv.free(1)
    kv.free(2)
    kv.allocate("d", [3], 6 * BLOCK)  # every block: the cached ones now hold other tokens
    kv.free(3)
    assert kv.allocate("e", [4], 65, keys=keys) == 0


@pytest.mark.parametrize("misuse, message", [
    (lambda kv, keys: kv.allocate("a", [0, 1], 65, keys=keys), "single sequence"),
    (lambda kv, keys: kv.allocate("a", [0], 65, encoder_len=10, keys=keys), "without an encoder"),
    (lambda kv, keys: kv.allocate("a", [0], 65, keys=keys) or kv.swap_out("a"), "recompute it"),
    (lambda kv, keys: KVBlockManager(8, BLOCK, windows=(64, None), prefix_caching=True), "full-attention"),
])
def test_misuse_is_named(misuse, message):
    kv = KVBlockManager(8, BLOCK, num_host_blocks=8, prefix_caching=True)
    with pytest.raises(ValueError, match=message):
        misuse(kv, block_keys(range(65), BLOCK))


def test_a_repeated_prompt_prefills_after_its_cached_blocks():
    engine = make_engine()
    request = ("a", {"prompt_token_ids": [(3 * k) % VOCAB for k in range(100)]}, params(12))
    expected = solo(False, request)
    assert run(engine, [request]) == {"a": expected}
    engine.add_request("again", request[1], request[2])
    while engine.has_unfinished_requests():
        outputs = engine.step()
    assert [c.token_ids for c in outputs[0].outputs] == expected and outputs[0].num_cached_tokens == 96
    assert engine.runner.model.prefill_chunks[-1] == [(96, 100)]
    assert (engine.scheduler.prefix_cache_queries, engine.scheduler.prefix_cache_hits) == (200, 96)


@pytest.mark.parametrize("decode", DECODE_MODES.values(), ids=DECODE_MODES.keys())
def test_the_next_turn_finds_the_answers_blocks(decode):
    """A finished sequence's computed blocks are cached past its prompt: its prompt and answer, 40 + 60 tokens of which
    99 are computed (the last sampled one never runs), give three full blocks the next turn's prompt starts with."""
    engine = make_engine(**decode)
    first = [(2 * k + 1) % VOCAB for k in range(40)]
    answer = run(engine, [("turn1", {"prompt_token_ids": first}, params(60))])["turn1"][0]
    turn2 = ("turn2", {"prompt_token_ids": first + answer + [7, 8, 9]}, params(10))
    engine.add_request(*turn2)
    while engine.has_unfinished_requests():
        outputs = engine.step()
    assert outputs[0].num_cached_tokens == 3 * BLOCK
    assert [c.token_ids for c in outputs[0].outputs] == solo(False, turn2)
    kv = engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks


def test_a_hit_leaving_one_token_runs_it_as_a_decode_step():
    engine = make_engine()
    request = ("a", {"prompt_token_ids": [(5 * k + 1) % VOCAB for k in range(97)]}, params(10))
    expected = solo(False, request)
    run(engine, [request])
    prefills = len(engine.runner.model.prefill_chunks)
    assert run(engine, [("again",) + request[1:]]) == {"again": expected}
    assert len(engine.runner.model.prefill_chunks) == prefills  # no prefill: the 97th token decoded


@pytest.mark.parametrize("config", [dict(enable_prefix_caching=False), dict(preemption_mode="swap")])
def test_off_when_disabled_or_preempting_by_swap(config):
    engine = make_engine(**config)
    request = ("a", {"prompt_token_ids": list(range(80))}, params(4))
    run(engine, [request, ("b",) + request[1:]])
    run(engine, [("c",) + request[1:]])
    assert engine.scheduler.prefix_cache_hits == 0
    assert all(start == 0 for call in engine.runner.model.prefill_chunks for start, _ in call)


def test_off_with_sliding_window_groups_or_for_a_model_that_says_so():
    config = EngineConfig(num_kv_blocks=16, num_host_kv_blocks=0, block_size=BLOCK, max_num_batched_tokens=64)
    assert not Scheduler(config, kv_windows=(64, None)).prefix_caching
    assert not Scheduler(config, model_caches_prefixes=False).prefix_caching
    assert Scheduler(config).prefix_caching


def stem(i: int, length: int) -> list[int]:
    return [(11 * i + 5 * k + 2) % VOCAB for k in range(length)]


def test_shared_stems_under_preemption_equal_solo_runs():
    """Requests sharing system-prompt-like stems in a pool too small for all: hits, recomputations and evictions."""
    requests = [(f"r{i}", {"prompt_token_ids": stem(i % 2, 70) + stem(10 + i, 3 + 9 * i)}, params(100 + 5 * i))
                for i in range(6)]
    engine = make_engine(num_kv_blocks=12, max_num_seqs=4)
    assert run(engine, requests, arrivals=[0, 1, 2, 3, 4, 5]) == {r[0]: solo(False, r) for r in requests}
    assert engine.scheduler.num_preemptions > 0 and engine.scheduler.prefix_cache_hits >= 4 * 64


@settings(max_examples=80, deadline=None)
@given(
    stems=st.lists(st.integers(20, 100), min_size=1, max_size=3),
    requests=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(1, 30), st.sampled_from([1, 1, 2])),
                      min_size=2, max_size=7),
    arrivals=st.lists(st.integers(0, 30), min_size=7, max_size=7),
    num_kv_blocks=st.integers(16, 48),
    budget=st.integers(1, 128),
    chunked=st.booleans(),
    mode=st.sampled_from([None, "recompute"]),
    max_num_seqs=st.integers(3, 8),
    decode=st.sampled_from(list(DECODE_MODES.values())),
)
def test_random_workloads_over_shared_stems_equal_solo_runs(stems, requests, arrivals, num_kv_blocks, budget, chunked,
                                                            mode, max_num_seqs, decode):
    """Prompts of a shared stem (``stems[s]`` tokens) and a suffix of their own; ``n = 2`` requests do not take part
    but share the pool. Every block is free after (``run`` checks)."""
    workload = []
    for i, (s, suffix, max_tokens, n) in enumerate(requests):
        tokens = stem(s, stems[s % len(stems)]) + stem(20 + i, suffix)
        workload.append((f"r{i}", {"prompt_token_ids": tokens or [1]}, params(max_tokens, n, seed=i)))
    engine = make_engine(num_kv_blocks=num_kv_blocks, max_num_batched_tokens=budget if chunked else None,
                         enable_chunked_prefill=chunked, preemption_mode=mode, max_num_seqs=max_num_seqs, **decode)
    fits = fitting(engine, workload)
    assert run(engine, fits, arrivals[:len(fits)]) == {r[0]: solo(False, r) for r in fits}
