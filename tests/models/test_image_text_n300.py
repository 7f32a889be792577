"""The image+text families with image tokens in the prompt (Gemma 3, Qwen2.5-VL, Qwen3-VL, Mistral 3) on a mock n300
(1x2), the real ttnn validating every call: one replica with both towers tensor-parallel over the two chips, and two
replicas (tt_data_parallel=2), in both profiles; the smallest dims that split (:mod:`tests.models.image_text_on_mock`).
Every family's cases run in one process, which pays the mock cluster's start-up once."""

import pytest

from tests.models import board_runs, image_text_on_mock

pytestmark = pytest.mark.mock


def test_tensor_parallel_on_a_mesh():
    cases = [case for family in image_text_on_mock.FAMILIES for case in board_runs.cases(family)]
    stdout = board_runs.run_on_board(image_text_on_mock.__name__, "n300", cases)
    for case in cases:
        assert f"ok {case} {image_text_on_mock.SHAPES}" in stdout
