"""Gemma 3 on the mock n150 (:mod:`tests.models.image_text_cases`: prefill of a two-image row and a text-only row,
longer than the sliding window, and decode; the vision tower and projector with heads of 48 zero-padded to 64 here):
the real ttnn validates every call (values read back are zeros there, so only shapes are checked). The mock n300:
``tests/models/test_image_text_n300.py``."""

import pytest

from tests.models import image_text_cases as shared
from tests.models.image_text_cases import BLOCK, MAX_BATCH, MOCK_WIDTH
from tests.models.test_gemma3_pcc import FAMILY
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.runtime import use
from tt_models.testing.gemma3 import UNTILED_HEADS, processed, tiny_gemma3
from tt_models.testing.images import random_image

pytestmark = pytest.mark.mock
family = shared.family_fixture(FAMILY)
test_n150 = shared.test_n150


def test_untiled_vision_heads_n150(mock_device):
    hf = tiny_gemma3(**UNTILED_HEADS)
    model = Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), mock_device, MAX_BATCH,
                                                           max_seq_len=MOCK_WIDTH * BLOCK, optimizations="performance")
    with use(mock_device):
        tokens = model.models[0].image_tokens(processed([random_image(80, 50, seed=0)])[0][0])
        assert tuple(tokens.shape) == (1, 1, 16, 128)


