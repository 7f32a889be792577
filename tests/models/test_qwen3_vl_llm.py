"""Qwen3-VL in tt-models' engine (host backend, a tiny checkpoint directory with its processor files): ``LLM.chat``
with image messages and ``LLM.generate`` with ``multi_modal_data`` give HF's ``Qwen3VLProcessor``'s prompt tokens and
the greedy tokens of the class driven directly with them (:mod:`tests.models.prompt_image_direct`: its rope deltas
handed to decode as the plugin hands them); chunked prefill with chunk boundaries inside the images' tokens gives them
too (each later chunk's M-RoPE positions and DeepStack rows from the whole prompt's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoProcessor

from tests.models import prompt_image_direct
from tt_models import LLM, SamplingParams
from tt_models.models.qwen3_vl.generator import Qwen3VLForConditionalGeneration
from tt_models.runtime import close_device, open_device
from tt_models.testing.images import random_image
from tt_models.testing.qwen3_vl import IMAGE_TOKEN, write_tiny_qwen3_vl_checkpoint

pytestmark = pytest.mark.slow
SIZES = dict(max_num_seqs=4, block_size=32, max_model_len=160)
MAX_TOKENS = 10
# (text, images as (width, height)): text only, one image, two images of different sizes.
CHATS = [("Hello, how are you today?", []), ("What is in this image?", [(120, 80)]),
         ("Compare the two pictures.", [(60, 130), (40, 40)])]
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def user(text: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_qwen3_vl_checkpoint(tmp_path_factory.mktemp("tiny-qwen3-vl"))


@pytest.fixture(scope="module")
def images() -> list[list[Any]]:
    return [[random_image(w, h, seed=10 * i + j) for j, (w, h) in enumerate(sizes)]
            for i, (_, sizes) in enumerate(CHATS)]


@pytest.fixture(scope="module")
def requests(model_dir: Path, images: list[list[Any]]) -> list[prompt_image_direct.Request]:
    processor = AutoProcessor.from_pretrained(model_dir)
    return [prompt_image_direct.chat_inputs(processor, user(text, [{"type": "image"}] * len(ims)), ims)
            for (text, _), ims in zip(CHATS, images)]


@pytest.fixture(scope="module")
def reference(model_dir: Path, requests: list[prompt_image_direct.Request]) -> list[list[int]]:
    device = open_device("host")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(prompt_image_direct.CLASSES, "qwen3_vl", Qwen3VLForConditionalGeneration)
            return prompt_image_direct.greedy_direct(model_dir, device, requests, max_tokens=MAX_TOKENS,
                                                     max_batch_size=SIZES["max_num_seqs"],
                                                     block_size=SIZES["block_size"],
                                                     max_model_len=SIZES["max_model_len"])
    finally:
        close_device(device)


def test_chat_and_generate_equal_the_class_driven_directly(model_dir, images, requests, reference):
    assert [tokens.count(IMAGE_TOKEN) for tokens, _ in requests] == [0, 8, 9]  # 4 x 2, then 2 x 4 + 1 x 1 tokens
    chats = [user(text, [{"type": "image_pil", "image_pil": im} for im in ims])
             for (text, _), ims in zip(CHATS, images)]
    with LLM(str(model_dir), backend="host", **SIZES) as llm:
        chatted = llm.chat(chats, GREEDY, use_tqdm=False)
        processor = AutoProcessor.from_pretrained(model_dir)
        prompts = [{"prompt": processor.apply_chat_template(user(text, [{"type": "image"}] * len(ims)),
                                                            add_generation_prompt=True, tokenize=False),
                    **({"multi_modal_data": {"image": ims}} if ims else {})} for (text, _), ims in zip(CHATS, images)]
        generated = llm.generate(prompts, GREEDY, use_tqdm=False)
    for outputs in (chatted, generated):
        assert [list(o.prompt_token_ids) for o in outputs] == [tokens for tokens, _ in requests]
        assert [list(o.outputs[0].token_ids) for o in outputs] == reference


def test_chunks_through_the_images(model_dir, images, reference):
    """Chunks of 8 tokens: the image prompts' chunks end inside their images' tokens (positions 36 to 46)."""
    chats = [user(text, [{"type": "image_pil", "image_pil": im} for im in ims])
             for (text, _), ims in zip(CHATS, images)]
    with LLM(str(model_dir), backend="host", **SIZES, max_num_batched_tokens=8) as llm:
        outputs = llm.chat(chats, GREEDY, use_tqdm=False)
    assert [list(o.outputs[0].token_ids) for o in outputs] == reference
