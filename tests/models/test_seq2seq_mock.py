"""Whisper (English-only and multilingual), BART and MBart encoder, prefill and decode paths on the mock device,
in both optimization profiles (all bf16, or all bfloat8_b weights and KV cache): the real ttnn validates every
call, decode's sharded configs included; values read back are zeros there, so only shapes are checked."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.seq2seq_on_mock import expected, run
from tests.models.seq2seq_reference import CASES
from tt_models.tt.model_config import PROFILES

pytestmark = pytest.mark.mock
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("optimizations", PROFILES)
@pytest.mark.parametrize("name", CASES)
def test_encoder_prefill_and_decode_on_mock(mock_device, name, optimizations):
    assert run(mock_device, name, optimizations) == expected(name)


# One process per data-parallel setting (one mock board per process), both families in it: the profiles' dtypes are
# covered on the n150 above.
@pytest.mark.parametrize("data_parallel", [1, 2])
def test_n300(data_parallel):
    """A 1x2 mesh: the models replicated on both chips, or one replica per chip (tt_data_parallel=2)."""
    names = ["whisper-multilingual", "bart"]
    command = [sys.executable, "-m", "tests.models.seq2seq_on_mock", "n300", str(data_parallel), "performance", *names]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in names:
        assert f"ok {name} {expected(name)}" in result.stdout
