"""Mistral 3 in tt-models' engine (host backend, a tiny checkpoint directory with its processor files): ``LLM.chat``
with image messages and ``LLM.generate`` with ``multi_modal_data`` give HF's ``PixtralProcessor``'s prompt tokens
(``[IMG]`` rows with ``[IMG_BREAK]`` / ``[IMG_END]``) and the greedy tokens of the class driven directly with them
(:mod:`tests.models.prompt_image_direct`); a prompt with fewer ``[IMG]`` than its images is refused; chunked prefill
with chunk boundaries inside the images' tokens gives them too (attention is causal: a later chunk reads the earlier
image rows' K/V from the cache). The tests are :mod:`tests.models.image_chat_cases`'."""

from __future__ import annotations

import pytest

from tests.models import image_chat_cases as shared
from tests.models.image_chat_cases import ImageChatFamily
from tt_models.models.mistral3.generator import Mistral3ForConditionalGeneration
from tt_models.testing.mistral3 import IMAGE_BREAK, write_tiny_mistral3_checkpoint

pytestmark = pytest.mark.slow
FAMILY = ImageChatFamily(
    name="mistral3", write_checkpoint=write_tiny_mistral3_checkpoint, generator=Mistral3ForConditionalGeneration,
    chats=[("Hello, how are you today?", []), ("What is in this image?", [(84, 56)]),
           ("Compare the two pictures.", [(40, 70), (28, 42)])],
    sizes=dict(max_num_seqs=4, block_size=32, max_model_len=128), max_tokens=12,
    # Images of several rows: [IMG_BREAK]s live.
    requests_check=lambda requests: any(tokens.count(IMAGE_BREAK) > 1 for tokens, _ in requests),
    refused=r"1 \[IMG\] tokens for 2 images")
# The shared fixtures, and tests (below, in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
model_dir, images, requests, reference = shared.model_dir, shared.images, shared.requests, shared.reference
test_chat_and_generate_equal_the_class_driven_directly = shared.test_chat_and_generate_equal_the_class_driven_directly
test_chunks_through_the_images = shared.test_chunks_through_the_images
