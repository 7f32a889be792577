"""Llama 3.2 Vision's vision encoder, prefill (an image row and a text-only row) and decode on the mock device:
the real ttnn validates every call (values read back are zeros there, so only shapes are checked)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.mllama_on_mock import MAX_BATCH, run
from tests.models.mllama_reference import TEXT

pytestmark = pytest.mark.mock
ROOT = Path(__file__).resolve().parents[2]
VOCAB = TEXT["vocab_size"]
EXPECTED = [(2, 1, VOCAB), (MAX_BATCH, 1, VOCAB)]


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_n150(mock_device, profile):
    assert run(mock_device, 1, profile) == EXPECTED


@pytest.mark.parametrize("data_parallel", [1, 2])
def test_n300(data_parallel):
    """A 1x2 mesh: the model replicated on both chips, or one replica per chip (tt_data_parallel=2)."""
    command = [sys.executable, "-m", "tests.models.mllama_on_mock", "n300", str(data_parallel), "performance"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ok {EXPECTED}" in result.stdout
