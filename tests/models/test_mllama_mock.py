"""Llama 3.2 Vision's vision encoder, prefill (an image row and a text-only row) and decode on the mock device:
the real ttnn validates every call (values read back are zeros there, so only shapes are checked)."""

import pytest

from tests.models import board_runs
from tests.models.mllama_on_mock import MAX_BATCH, run
from tt_models.testing.mllama import TEXT

pytestmark = pytest.mark.mock
VOCAB = TEXT["vocab_size"]
EXPECTED = [(2, 1, VOCAB), (MAX_BATCH, 1, VOCAB)]


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_n150(mock_device, profile):
    assert run(mock_device, "tiny", 1, profile) == EXPECTED


# One process per board (one mock board per process): TP needs a config whose widths and heads split over the chips.
@pytest.mark.parametrize("board, config", [("n300", "tiny"), ("t3k", "tp")])
def test_tensor_parallel_on_a_mesh(board, config):
    """A 1x2 (n300) or 1x8 (T3K) mesh: one replica (both towers) tensor-parallel over every chip, or two
    (tt_data_parallel=2) each over half of them (a T3K's two 1x4 groups)."""
    cases = board_runs.cases(config, board)
    stdout = board_runs.run_on_board("tests.models.mllama_on_mock", board, cases)
    for case in cases:
        assert f"ok {case} {EXPECTED}" in stdout
