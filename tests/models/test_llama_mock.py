"""The Llama-family prefill and decode paths on the mock device: the real ttnn validates every call
(values read back are zeros there, so only shapes are checked).

Every test config (MHA, GQA, q/k/v bias, tied embeddings, Llama-3 rope scaling, sliding window) runs in both
optimization profiles on an n150: the profiles store weights and KV caches in different dtypes (bf16,
bfloat8_b, bfloat4_b), which the real ops accept or reject differently.
"""

import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.models.hf_reference import TINY_CONFIGS, tiny_model
from tests.models.llama_on_mock import MAX_BATCH, run
from tt_models.runtime import close_device, open_device
from tt_models.tt.model_config import PROFILES

pytestmark = pytest.mark.mock
ROOT = Path(__file__).resolve().parents[2]
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


def test_n150_while_a_host_device_is_open(mock_device, checkpoint):
    """``ttnn`` follows the most recently opened device: with a host device opened after the mock one, the mock
    model must still build its inputs with the real ttnn (its entry points set the API per replica device)."""
    host = open_device("host")
    try:
        assert run(mock_device, checkpoint("qwen2-bias"), 1, "performance") == SHAPES
    finally:
        close_device(host)


# Each n300 run is a fresh process (one mock board per process) and costs 7-20 s: the mesh paths run for one
# config (GQA with q/k/v bias); the profiles' dtypes are covered on the n150 above.
@pytest.mark.parametrize("data_parallel, optimizations", [(1, "performance"), (2, "performance"), (2, "accuracy")])
def test_n300(checkpoint, data_parallel, optimizations):
    """A 1x2 mesh: the model replicated on both chips, or one replica per chip (tt_data_parallel=2)."""
    command = [sys.executable, "-m", "tests.models.llama_on_mock", checkpoint("qwen2-bias"), "n300",
               str(data_parallel), optimizations]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ok {SHAPES}" in result.stdout
