"""The Llama-family prefill and decode paths on the mock device: the real ttnn validates every call
(values read back are zeros there, so only shapes are checked).

Every test config (MHA, GQA, q/k/v bias, tied embeddings, Llama-3 rope scaling, sliding window) runs in both
optimization profiles on an n150: the profiles store weights and KV caches in different dtypes (bf16,
bfloat8_b, bfloat4_b), which the real ops accept or reject differently. The tensor-parallel paths (collectives,
per-chip decode configs, vocabulary-split LM head) run on an n300 and a T3K, in both profiles too.
"""

from typing import Callable

import pytest

from tests.models import board_runs
from tests.models.llama_on_mock import MAX_BATCH, run
from tt_models.runtime import close_device, open_device
from tt_models.testing.llama import TINY_CONFIGS, tiny_model
from tt_models.tt.model_config import PROFILES

pytestmark = pytest.mark.mock
VOCAB = 320
# prefill, decode, raw decode read; device sampling: decode tokens and log-probs, prefill tokens
SHAPES = [(2, 1, VOCAB), (MAX_BATCH, 1, VOCAB), (MAX_BATCH, 1, VOCAB), (MAX_BATCH,), (MAX_BATCH,), (1,)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Callable[[str], str]:
    """``checkpoint(config_name)``: the tiny model saved as an HF directory (once per config)."""
    saved: dict[str, str] = {}

    def path(name: str) -> str:
        if name not in saved:
            directory = tmp_path_factory.mktemp(name)
            tiny_model(name).save_pretrained(directory)
            saved[name] = str(directory)
        return saved[name]

    return path


@pytest.mark.parametrize("optimizations", PROFILES)
@pytest.mark.parametrize("config", TINY_CONFIGS)
def test_n150(mock_device, checkpoint, config, optimizations):
    assert run(mock_device, checkpoint(config), 1, optimizations) == SHAPES


@pytest.mark.parametrize("optimizations", PROFILES)
def test_n150_with_more_query_heads_than_a_tile(mock_device, checkpoint, optimizations):
    """64 query heads on the one chip, with Qwen3's per-head q/k norms: each user's decode heads are two tiles of
    rows on its core (the norms read them as rows and shard them back), its 8 KV heads one."""
    assert run(mock_device, checkpoint("qwen3-64-heads"), 1, optimizations) == SHAPES


def test_n150_while_a_host_device_is_open(mock_device, checkpoint):
    """``ttnn`` follows the most recently opened device: with a host device opened after the mock one, the mock
    model must still build its inputs with the real ttnn (its entry points set the API per replica device)."""
    host = open_device("host")
    try:
        assert run(mock_device, checkpoint("qwen2-bias"), 1, "performance") == SHAPES
    finally:
        close_device(host)


# One process per board (one mock board per process): TP needs configs whose widths and heads split over the chips.
@pytest.mark.parametrize("board, config", [("n300", "qwen2-bias"), ("t3k", "qwen2-bias-tp"), ("n300", "qwen3-qk-norm"),
                                           ("t3k", "qwen3-qk-norm-tp")])
def test_tensor_parallel_on_a_mesh(checkpoint, board, config):
    """A 1x2 (n300) or 1x8 (T3K) mesh: one replica tensor-parallel over every chip, or two (tt_data_parallel=2) each
    over half of them (a T3K's two 1x4 groups: its 2 KV heads are replicated on 2 chips each, on 4 chips with dp 1)."""
    cases = board_runs.cases(checkpoint(config), board)
    stdout = board_runs.run_on_board("tests.models.llama_on_mock", board, cases)
    for case in cases:
        assert f"ok {case} {SHAPES}" in stdout
