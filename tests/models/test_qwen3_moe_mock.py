"""Qwen3-MoE's prefill and decode paths on the mock device (real ttnn validation of the router's float32 logits,
top-k, threshold and sums, the stacked experts' matmuls and their collectives; values read back are zeros there, so
only shapes are checked): both profiles on an n150; the experts over the chips of an n300 (4 a chip) and a T3K (1 a
chip; two 1x4 replicas with tt_data_parallel=2), with the attention tensor-parallel, in both profiles
(:data:`tests.models.board_runs.SQUARE`)."""

from typing import Callable

import pytest

from tests.models import board_runs
from tests.models.test_llama_mock import SHAPES
from tests.models.llama_on_mock import run
from tt_models.testing.moe import tiny_moe
from tt_models.tt.model_config import PROFILES

pytestmark = pytest.mark.mock


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Callable[[str], str]:
    saved: dict[str, str] = {}

    def path(name: str) -> str:
        if name not in saved:
            directory = tmp_path_factory.mktemp(name)
            tiny_moe(name).save_pretrained(directory)
            saved[name] = str(directory)
        return saved[name]

    return path


@pytest.mark.parametrize("optimizations", PROFILES)
def test_n150(mock_device, checkpoint, optimizations):
    assert run(mock_device, checkpoint("qwen3-moe"), 1, optimizations) == SHAPES


@pytest.mark.parametrize("board, config", [("n300", "qwen3-moe"), ("t3k", "qwen3-moe-tp")])
def test_experts_over_a_mesh(checkpoint, board, config):
    cases = board_runs.cases(checkpoint(config), board)
    stdout = board_runs.run_on_board("tests.models.llama_on_mock", board, cases)
    for case in cases:
        assert f"ok {case} {SHAPES}" in stdout
