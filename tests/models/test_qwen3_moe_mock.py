"""Qwen3-MoE's prefill and decode paths on the mock device (:mod:`tests.models.moe_cases`: real ttnn validation of
the router's float32 logits, top-k, threshold and sums, the stacked experts' matmuls and their collectives; values
read back are zeros there, so only shapes are checked): both profiles on an n150; the experts over the chips of an
n300 (4 a chip) and a T3K (1 a chip; two 1x4 replicas with tt_data_parallel=2), with the attention tensor-parallel,
in both profiles (:data:`tests.models.board_runs.SQUARE`)."""

import pytest

from tests.models import moe_cases as shared
from tests.models.test_qwen3_moe import FAMILY

pytestmark = pytest.mark.mock

family = shared.family_fixture(FAMILY)
checkpoint = shared.checkpoint
test_n150 = shared.test_n150
test_experts_over_a_mesh = shared.test_experts_over_a_mesh
