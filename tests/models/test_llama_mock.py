"""The Llama-family prefill and decode paths on the mock device: the real ttnn validates every call
(values read back are zeros there, so only shapes are checked)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.hf_reference import tiny_model
from tests.models.llama_on_mock import MAX_BATCH, run

pytestmark = pytest.mark.mock
ROOT = Path(__file__).resolve().parents[2]
VOCAB = 320


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    tiny_model("qwen2-bias").save_pretrained(path)  # GQA, q/k/v bias
    return str(path)


def test_n150(mock_device, checkpoint):
    assert run(mock_device, checkpoint, 1) == [(2, 1, VOCAB), (MAX_BATCH, 1, VOCAB), (MAX_BATCH, 1, VOCAB)]


@pytest.mark.parametrize("data_parallel", [1, 2])
def test_n300(checkpoint, data_parallel):
    """A 1x2 mesh: the model replicated on both chips, or one replica per chip (tt_data_parallel=2)."""
    command = [sys.executable, "-m", "tests.models.llama_on_mock", checkpoint, "n300", str(data_parallel)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ok [(2, 1, {VOCAB}), ({MAX_BATCH}, 1, {VOCAB}), ({MAX_BATCH}, 1, {VOCAB})]" in result.stdout
