"""Qwen3-VL in tt-models' engine (host backend, a tiny checkpoint directory with its processor files): ``LLM.chat``
with image messages and ``LLM.generate`` with ``multi_modal_data`` give HF's ``Qwen3VLProcessor``'s prompt tokens and
the greedy tokens of the class driven directly with them (:mod:`tests.models.prompt_image_direct`: its rope deltas
handed to decode as the plugin hands them); chunked prefill with chunk boundaries inside the images' tokens
(positions 36 to 46) gives them too (each later chunk's M-RoPE positions and DeepStack rows from the whole prompt's).
The tests are :mod:`tests.models.image_chat_cases`'."""

from __future__ import annotations

import pytest

from tests.models import image_chat_cases as shared
from tests.models.image_chat_cases import ImageChatFamily
from tt_models.models.qwen3_vl.generator import Qwen3VLForConditionalGeneration
from tt_models.testing.qwen3_vl import IMAGE_TOKEN, write_tiny_qwen3_vl_checkpoint

pytestmark = pytest.mark.slow
FAMILY = ImageChatFamily(
    name="qwen3_vl", write_checkpoint=write_tiny_qwen3_vl_checkpoint, generator=Qwen3VLForConditionalGeneration,
    chats=[("Hello, how are you today?", []), ("What is in this image?", [(120, 80)]),
           ("Compare the two pictures.", [(60, 130), (40, 40)])],
    sizes=dict(max_num_seqs=4, block_size=32, max_model_len=160), max_tokens=10,
    # 4 x 2, then 2 x 4 + 1 x 1 tokens.
    requests_check=lambda requests: [tokens.count(IMAGE_TOKEN) for tokens, _ in requests] == [0, 8, 9])
# The shared fixtures, and tests (below, in the order they run), collected here for FAMILY.
family = shared.family_fixture(FAMILY)
model_dir, images, requests, reference = shared.model_dir, shared.images, shared.requests, shared.reference
test_chat_and_generate_equal_the_class_driven_directly = shared.test_chat_and_generate_equal_the_class_driven_directly
test_chunks_through_the_images = shared.test_chunks_through_the_images
