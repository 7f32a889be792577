"""Mistral 3 in tt-models' engine (host backend, a tiny checkpoint directory with its processor files): ``LLM.chat``
with image messages and ``LLM.generate`` with ``multi_modal_data`` give HF's ``PixtralProcessor``'s prompt tokens
(``[IMG]`` rows with ``[IMG_BREAK]`` / ``[IMG_END]``) and the greedy tokens of the class driven directly with them
(:mod:`tests.models.prompt_image_direct`); chunked prefill with chunk boundaries inside the images' tokens gives
them too (attention is causal: a later chunk reads the earlier image rows' K/V from the cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoProcessor

from tests.models import prompt_image_direct
from tt_models import LLM, SamplingParams
from tt_models.models.mistral3.generator import Mistral3ForConditionalGeneration
from tt_models.runtime import close_device, open_device
from tt_models.testing.images import random_image
from tt_models.testing.mistral3 import write_tiny_mistral3_checkpoint

pytestmark = pytest.mark.slow
SIZES = dict(max_num_seqs=4, block_size=32, max_model_len=128)
MAX_TOKENS = 12
# (text, images as (width, height)): text only, one image, two images of different sizes.
CHATS = [("Hello, how are you today?", []), ("What is in this image?", [(84, 56)]),
         ("Compare the two pictures.", [(40, 70), (28, 42)])]
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def user(text: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_mistral3_checkpoint(tmp_path_factory.mktemp("tiny-mistral3"))


@pytest.fixture(scope="module")
def images() -> list[list[Any]]:
    return [[random_image(w, h, seed=10 * i + j) for j, (w, h) in enumerate(sizes)]
            for i, (_, sizes) in enumerate(CHATS)]


@pytest.fixture(scope="module")
def requests(model_dir: Path, images: list[list[Any]]) -> list[prompt_image_direct.Request]:
    """HF's processor's prompt tokens of each chat, and its images cropped to their ``image_sizes`` (as vLLM's
    processor hands them)."""
    processor = AutoProcessor.from_pretrained(model_dir)
    out = []
    for (text, _), ims in zip(CHATS, images):
        prompt = processor.apply_chat_template(user(text, [{"type": "image"}] * len(ims)), add_generation_prompt=True,
                                               tokenize=False)
        inputs = processor(text=[prompt], images=ims or None, return_tensors="pt", add_special_tokens=False)
        pixel_values = [p[:, :h, :w] for p, (h, w) in zip(inputs.get("pixel_values", []),
                                                           inputs.get("image_sizes", []).tolist() if ims else [])]
        out.append((inputs["input_ids"][0].tolist(), {"pixel_values": pixel_values} if ims else {}))
    return out


@pytest.fixture(scope="module")
def reference(model_dir: Path, requests: list[prompt_image_direct.Request]) -> list[list[int]]:
    device = open_device("host")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(prompt_image_direct.CLASSES, "mistral3", Mistral3ForConditionalGeneration)
            return prompt_image_direct.greedy_direct(model_dir, device, requests, max_tokens=MAX_TOKENS,
                                                     max_batch_size=SIZES["max_num_seqs"],
                                                     block_size=SIZES["block_size"],
                                                     max_model_len=SIZES["max_model_len"])
    finally:
        close_device(device)


def test_chat_and_generate_equal_the_class_driven_directly(model_dir, images, requests, reference):
    assert any(tokens.count(501) > 1 for tokens, _ in requests)  # images of several rows: [IMG_BREAK]s live
    chats = [user(text, [{"type": "image_pil", "image_pil": im} for im in ims])
             for (text, _), ims in zip(CHATS, images)]
    with LLM(str(model_dir), backend="host", **SIZES) as llm:
        chatted = llm.chat(chats, GREEDY, use_tqdm=False)
        processor = AutoProcessor.from_pretrained(model_dir)
        prompts = [{"prompt": processor.apply_chat_template(user(text, [{"type": "image"}] * len(ims)),
                                                            add_generation_prompt=True, tokenize=False),
                    **({"multi_modal_data": {"image": ims}} if ims else {})} for (text, _), ims in zip(CHATS, images)]
        generated = llm.generate(prompts, GREEDY, use_tqdm=False)
        with pytest.raises(ValueError, match=r"1 \[IMG\] tokens for 2 images"):
            llm.generate({"prompt": prompts[1]["prompt"], "multi_modal_data": {"image": images[2]}})
    for outputs in (chatted, generated):
        assert [list(o.prompt_token_ids) for o in outputs] == [tokens for tokens, _ in requests]
        assert [list(o.outputs[0].token_ids) for o in outputs] == reference


def test_chunks_through_the_images(model_dir, images, reference):
    """Chunks of 8 tokens: the image prompts' chunks end inside their images' tokens."""
    chats = [user(text, [{"type": "image_pil", "image_pil": im} for im in ims])
             for (text, _), ims in zip(CHATS, images)]
    with LLM(str(model_dir), backend="host", **SIZES, max_num_batched_tokens=8) as llm:
        outputs = llm.chat(chats, GREEDY, use_tqdm=False)
    assert [list(o.outputs[0].token_ids) for o in outputs] == reference
