"""The default KV pool: every slot's request at full length, capped by what a chip's memory holds after its weights.

Sized per chip of a tensor-parallel replica: TT vLLM's ``kv_heads // min(chips, kv_heads)`` heads per chip.
"""

import pytest
from transformers import LlamaConfig

from tt_models.engine.config import EngineConfig, KVShape, kv_shape

CONFIG = LlamaConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_hidden_layers=2,
                     max_position_embeddings=1024)


def _resolved(**kwargs) -> EngineConfig:
    return EngineConfig(max_num_seqs=8, block_size=64, max_model_len=512, **kwargs).resolve(CONFIG, 0)


def test_pool_holds_every_slot_at_full_length_when_memory_allows():
    config = _resolved().with_kv_pool(blocks_that_fit=10**6, max_encoder_len=0)
    assert config.num_kv_blocks == 8 * (512 // 64) and config.num_host_kv_blocks == config.num_kv_blocks


@pytest.mark.parametrize("fit, expected", [(20, 20), (3, 8)])  # memory-bound; never below one request (8 blocks)
def test_pool_is_capped_by_the_memory_left(fit, expected):
    assert _resolved().with_kv_pool(blocks_that_fit=fit, max_encoder_len=0).num_kv_blocks == expected


def test_pool_per_replica_and_given_sizes_are_kept():
    config = _resolved(data_parallel_size=2).with_kv_pool(blocks_that_fit=10**6, max_encoder_len=100)
    assert config.num_kv_blocks == 4 * (512 // 64 + 2)  # 4 slots per replica, each with 2 cross blocks
    given = _resolved(num_kv_blocks=9, num_host_kv_blocks=3)
    assert given.with_kv_pool(blocks_that_fit=1, max_encoder_len=0) == given


@pytest.mark.parametrize("chips, heads", [(1, 4), (2, 2), (4, 1), (8, 1)])
def test_block_bytes_are_one_chips_share(chips, heads):
    shape = kv_shape(CONFIG).per_chip(chips)
    assert shape == KVShape(2, heads, 32)
    assert shape.block_bytes(64) * min(chips, 4) == kv_shape(CONFIG).block_bytes(64)
