"""Qwen2.5-VL in tt-models' engine (host backend, tiny checkpoint directory with its processor files): ``LLM.chat``
with image messages and ``LLM.generate`` with ``multi_modal_data`` give the greedy tokens of the class driven
directly (tests/models/qwen2_5_vl_direct.py, HF's processor of the same checkpoint); chunked prefill with chunk
boundaries inside the images' tokens and preemption by recomputation (the vision tower reruns) keep them up to a
near-tie (a chunk reads its prompt's earlier K/V back from the bfloat8 cache, where a whole prefill uses them as
computed: the tiny model's request 0 flips at its 4th token, margin 0.005)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from transformers import AutoProcessor

from tests.models.qwen2_5_vl_checkpoint import write_tiny_qwen2_5_vl_checkpoint
from tests.models.qwen2_5_vl_direct import chat_inputs, greedy_direct
from tests.models.qwen2_5_vl_reference import random_image
from tt_models import LLM, SamplingParams
from tt_models.runtime import close_device, open_device

pytestmark = pytest.mark.slow
SIZES = dict(max_num_seqs=4, block_size=32, max_model_len=256)
MAX_TOKENS = 16
# (text, images as (width, height)): text only, 28 and 28 + 12 image tokens, then the largest image (64 tokens); the
# prompts are 55, 83, 103 and 125 tokens long.
CHATS = [("Hello, how are you today?", []), ("What is in this image?", [(200, 120)]),
         ("Compare the two pictures.", [(200, 120), (60, 180)]),
         ("Describe the picture in one sentence.", [(224, 224)])]
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)
NEAR_TIE = 0.1  # largest logprob margin at which a chunked run may flip a greedy token


def user(text: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_qwen2_5_vl_checkpoint(tmp_path_factory.mktemp("tiny-qwen2.5-vl"))


@pytest.fixture(scope="module")
def images() -> list[list[Image.Image]]:
    return [[random_image(w, h, seed=10 * i + j) for j, (w, h) in enumerate(sizes)]
            for i, (_, sizes) in enumerate(CHATS)]


@pytest.fixture(scope="module")
def processor(model_dir: Path) -> Any:
    return AutoProcessor.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def reference(model_dir: Path, images: list[list[Image.Image]], processor: Any) -> list[list[int]]:
    requests = [chat_inputs(processor, user(text, [{"type": "image"}] * len(ims)), ims)
                for (text, _), ims in zip(CHATS, images)]
    device = open_device("host")
    try:
        return greedy_direct(model_dir, device, requests, max_tokens=MAX_TOKENS, max_batch_size=SIZES["max_num_seqs"],
                             block_size=SIZES["block_size"], max_model_len=SIZES["max_model_len"])
    finally:
        close_device(device)


def chats(images: list[list[Image.Image]]) -> list[list[dict[str, Any]]]:
    return [user(text, [{"type": "image_pil", "image_pil": im} for im in ims]) for (text, _), ims in zip(CHATS, images)]


@pytest.fixture(scope="module")
def whole(model_dir: Path, images: list[list[Image.Image]]) -> list[Any]:
    """The engine's chat outputs, each prompt prefilled whole."""
    with LLM(str(model_dir), backend="host", **SIZES) as llm:
        return llm.chat(chats(images), GREEDY, use_tqdm=False)


def test_chat_and_generate_equal_the_class_driven_directly(model_dir: Path, images: list[list[Image.Image]],
                                                           processor: Any, reference: list[list[int]],
                                                           whole: list[Any]) -> None:
    with LLM(str(model_dir), backend="host", **SIZES) as llm:
        prompts = [{"prompt": processor.apply_chat_template(user(text, [{"type": "image"}] * len(ims)),
                                                            add_generation_prompt=True, tokenize=False),
                    **({"multi_modal_data": {"image": ims}} if ims else {})} for (text, _), ims in zip(CHATS, images)]
        generated = llm.generate(prompts, GREEDY, use_tqdm=False)
        with pytest.raises(ValueError, match="1 <\\|image_pad\\|> tokens for 2 images"):
            llm.generate({"prompt": prompts[1]["prompt"], "multi_modal_data": {"image": images[2]}})
        with pytest.raises(ValueError, match="Not an image"):
            llm.generate({"prompt": prompts[1]["prompt"], "multi_modal_data": {"image": "cat.png"}})
    assert [list(o.outputs[0].token_ids) for o in whole] == reference
    assert [list(o.outputs[0].token_ids) for o in generated] == reference


@pytest.mark.parametrize("config", [dict(max_num_batched_tokens=32), dict(num_kv_blocks=9)],
                         ids=["chunks-through-images", "preempted-recomputed"])
def test_chunked_prefill_and_recomputation_rerun_the_images(model_dir: Path, images: list[list[Image.Image]],
                                                            whole: list[Any], config: dict[str, int]) -> None:
    """32-token chunks split every image's tokens. A pool of 9 blocks of 32 admits the first three prompts (2 + 3 +
    4 blocks); the text-only one then grows into a third block, which preempts the newest, the two-image request:
    recomputed, it reruns the vision tower on both images."""
    with LLM(str(model_dir), backend="host", **SIZES, **config) as llm:
        outputs = llm.chat(chats(images), GREEDY, use_tqdm=False)
    if "num_kv_blocks" in config:
        assert sum(o.metrics.num_preemptions for o in outputs) > 0
    for i, (got, ref) in enumerate(zip(outputs, whole)):
        got, ref = got.outputs[0].token_ids, ref.outputs[0].token_ids
        k = next((k for k, (a, b) in enumerate(zip(got, ref)) if a != b), None)
        if k is not None:
            top = whole[i].outputs[0].logprobs[k]
            margin = top[ref[k]].logprob - top.get(got[k], top[ref[k]]).logprob
            print(f"\nrequest {i}: differs from the whole prefill at token {k}, margin {margin:.4f}")
            assert got[k] in top and margin < NEAR_TIE, f"request {i}: not a near-tie at token {k}"
