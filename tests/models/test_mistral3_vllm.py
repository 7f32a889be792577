"""The real TT vLLM plugin serving tt-models' Mistral 3 with image prompts on the host backend: ``vllm.LLM.chat`` with
PIL images (one image, two of different sizes, text only) goes through vLLM's Mistral 3 processor (registered on the
TT class) and the plugin's ``pixel_values`` gathering; the prompt tokens equal HF's ``PixtralProcessor``'s and the
greedy tokens the class driven directly with them (the family of :mod:`tests.models.test_mistral3_llm`, the test
:mod:`tests.models.image_chat_cases`'). Heavy: it takes the machine for about half a minute."""

from __future__ import annotations

import pytest

from tests.models import image_chat_cases as shared
from tests.models.test_mistral3_llm import FAMILY

pytestmark = pytest.mark.heavy
family = shared.family_fixture(FAMILY)
model_dir, images, requests, reference = shared.model_dir, shared.images, shared.requests, shared.reference
test_vllm_chat_with_images_equals_the_class_driven_directly = (
    shared.test_vllm_chat_with_images_equals_the_class_driven_directly)
