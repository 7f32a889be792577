"""The routed-expert families' prefill and decode paths on the mock device (real ttnn validating every call: the
router's float32 logits, top-k, threshold and sums, the stacked experts' matmuls and their collectives; GPT-OSS's
attention sinks in prefill, chunked prefill and paged decode, its sliding-window and full layers and biased
projections; values read back are zeros there, so only shapes are checked): each family in both profiles on an n150;
the experts over the chips of an n300 (4 a chip) and a T3K (1 a chip; two 1x4 replicas with tt_data_parallel=2), with
the attention tensor-parallel, in both profiles (:data:`tests.models.board_runs.SQUARE`), and on the T3K a GPT-OSS
whose hidden size is zero-padded to split over the chips: every case in one process per board, which pays the mock
cluster's start-up once."""

from __future__ import annotations

import pytest

from tests.models import board_runs
from tests.models.llama_on_mock import run
from tests.models.test_gpt_oss import FAMILY as GPT_OSS
from tests.models.test_llama_mock import SHAPES
from tests.models.test_qwen3_moe import FAMILY as QWEN3_MOE
from tt_models.testing.moe import tiny_moe
from tt_models.tt.model_config import PROFILES

pytestmark = pytest.mark.mock

FAMILIES = {"qwen3-moe": QWEN3_MOE, "gpt-oss": GPT_OSS}
# GPT-OSS with a hidden size that does not split over 4 or 8 chips (160, zero-padded to 256:
# tt_models.tt.hidden_padding) and experts whose width does not either, as GPT-OSS-120B's 2880 on a T3K.
PADDED = "gpt-oss-padded"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    """Each tiny config the tests run, its HF model saved in a directory: config name -> path."""
    names = [name for family in FAMILIES.values() for name in (family.configs[0], family.tp_config)] + [PADDED]
    saved = {}
    for name in names:
        directory = tmp_path_factory.mktemp(name)
        tiny_moe(name).save_pretrained(directory)
        saved[name] = str(directory)
    return saved


@pytest.mark.parametrize("optimizations", PROFILES)
@pytest.mark.parametrize("family", FAMILIES)
def test_n150(mock_device, checkpoints, family, optimizations):
    assert run(mock_device, checkpoints[FAMILIES[family].configs[0]], 1, optimizations) == SHAPES


@pytest.mark.parametrize("board", ["n300", "t3k"])
def test_experts_over_a_mesh(checkpoints, board):
    cases = [case for family in FAMILIES.values()
             for case in board_runs.cases(checkpoints[family.configs[0] if board == "n300" else family.tp_config],
                                          board)]
    if board == "t3k":  # 1x8 and two 1x4 replicas
        cases += board_runs.cases(checkpoints[PADDED], board)
    stdout = board_runs.run_on_board("tests.models.llama_on_mock", board, cases)
    for case in cases:
        assert f"ok {case} {SHAPES}" in stdout
