"""Data-parallel replicas on the mock n300 (1x2 mesh): the engine's two replicas, each on its chip with its own
pool and slots, pass the real ttnn's validation for a decoder-only and an encoder-decoder model."""

import subprocess
import sys
from pathlib import Path

import pytest

from tt_models.testing.llama import tiny_model
from tt_models.testing.seq2seq import tiny_seq2seq

pytestmark = pytest.mark.mock
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("model", ["llama-gqa", "bart"])
def test_two_replicas_on_the_mock_n300(tmp_path, model):
    hf = tiny_seq2seq("bart") if model == "bart" else tiny_model(model)
    hf.save_pretrained(tmp_path)
    result = subprocess.run([sys.executable, "-m", "tests.engine.engine_on_mock", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok requests=[2, 2] finished=4 free=[8, 8]" in result.stdout
