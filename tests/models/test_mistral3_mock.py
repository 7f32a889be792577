"""Mistral 3 on the mock n150 (:mod:`tests.models.image_text_cases`: the Pixtral tower and projector, prefill of
a two-image row and a text-only row, and decode, the text layers with their sliding window): the real ttnn validates
every call (values read back are zeros there, so only shapes are checked). The mock n300:
``tests/models/test_image_text_n300.py``."""

import pytest

from tests.models import image_text_cases as shared
from tests.models.test_mistral3_pcc import FAMILY

pytestmark = pytest.mark.mock
family = shared.family_fixture(FAMILY)
test_n150 = shared.test_n150
