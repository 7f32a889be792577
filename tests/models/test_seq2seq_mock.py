"""Whisper (English-only and multilingual), BART and MBart encoder, prefill and decode paths on the mock device,
in both optimization profiles (all bf16, or all bfloat8_b weights and KV cache): the real ttnn validates every
call, decode's sharded configs included; values read back are zeros there, so only shapes are checked."""

import pytest

from tests.models import board_runs
from tests.models.seq2seq_on_mock import expected, run
from tt_models.testing.seq2seq import CASES
from tt_models.tt.model_config import PROFILES

pytestmark = pytest.mark.mock


@pytest.mark.parametrize("optimizations", PROFILES)
@pytest.mark.parametrize("name", CASES)
def test_encoder_prefill_and_decode_on_mock(mock_device, name, optimizations):
    assert run(mock_device, name, 1, optimizations) == expected(name)


# One process per board (one mock board per process), both families in it: TP needs configs whose widths and heads
# split over the chips.
@pytest.mark.parametrize("board, names", [("n300", ["whisper-multilingual", "bart"]),
                                          ("t3k", ["whisper-multilingual-tp", "bart-tp"])])
def test_tensor_parallel_on_a_mesh(board, names):
    """A 1x2 (n300) or 1x8 (T3K) mesh: one replica tensor-parallel over every chip, or two (tt_data_parallel=2) each
    over half of them (a T3K's two 1x4 groups)."""
    cases = {name: board_runs.cases(name, board) for name in names}
    stdout = board_runs.run_on_board("tests.models.seq2seq_on_mock", board,
                                     [case for runs in cases.values() for case in runs])
    for name, runs in cases.items():
        for case in runs:
            assert f"ok {case} {expected(name)}" in stdout
