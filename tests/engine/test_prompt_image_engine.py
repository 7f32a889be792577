"""The image models of TT vLLM's V1 image path, Qwen2.5-VL and Gemma 3, in tt-models' engine (host backend, tiny
checkpoint directories with their processor files): ``LLM.chat`` with image messages and ``LLM.generate`` with
``multi_modal_data`` give HF's processor's prompt tokens and the greedy tokens of the class driven directly with them
(tests/models/prompt_image_direct.py); chunked prefill with chunk boundaries inside the
images' tokens (a chunk holding image tokens reruns the prompt with the images) and preemption by recomputation (the
vision tower reruns) keep them up to a near-tie: a chunk reads its prompt's earlier K/V back from the bfloat8 cache,
where a whole prefill uses them as computed (the tiny Qwen's request 0 flips at its 4th token, margin 0.005)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from PIL import Image
from transformers import AutoProcessor

from tests.models.prompt_image_direct import chat_inputs, greedy_direct
from tt_models import LLM, SamplingParams
from tt_models.runtime import close_device, open_device
from tt_models.testing.gemma3 import write_tiny_gemma3_checkpoint
from tt_models.testing.images import random_image
from tt_models.testing.qwen2_5_vl import write_tiny_qwen2_5_vl_checkpoint

pytestmark = pytest.mark.slow
SIZES = dict(max_num_seqs=4, block_size=32, max_model_len=256)
MAX_TOKENS = 16
# (text, images as (width, height)): text only, one image, it beside a portrait one, then the largest image.
CHATS = [("Hello, how are you today?", []), ("What is in this image?", [(200, 120)]),
         ("Compare the two pictures.", [(200, 120), (60, 180)]),
         ("Describe the picture in one sentence.", [(224, 224)])]
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)
NEAR_TIE = 0.1  # largest logprob margin at which a chunked run may flip a greedy token


@dataclass(frozen=True)
class Family:
    write_checkpoint: Callable[[Path], Path]
    placeholder: str  # the image token, as a regex
    # Chunks that end inside the first image of every image prompt, and a KV pool of 32-token blocks that admits the
    # first three prompts; the text-only one then grows into another block, which preempts the newest, the two-image
    # request: recomputed, it reruns the vision tower on both images.
    chunked: dict[str, int]
    preempted: dict[str, int]


# Qwen2.5-VL: 28, 28 + 12 and 64 image tokens, prompts 55, 83, 103 and 125 tokens (2 + 3 + 4 blocks admitted).
# Gemma 3: every image resized to 64 x 64 (16 tokens), prompts 23, 40, 65 and 61 tokens (1 + 2 + 3 blocks in each
# of its two KV-cache groups, global and sliding, and the pool's null block).
FAMILIES = {
    "qwen2.5-vl": Family(write_tiny_qwen2_5_vl_checkpoint, "<\\|image_pad\\|>",
                         chunked=dict(max_num_batched_tokens=32), preempted=dict(num_kv_blocks=9)),
    "gemma3": Family(write_tiny_gemma3_checkpoint, "<start_of_image>",
                     chunked=dict(max_num_batched_tokens=16), preempted=dict(max_model_len=128, num_kv_blocks=13))}


def user(text: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def chats(images: list[list[Image.Image]]) -> list[list[dict[str, Any]]]:
    return [user(text, [{"type": "image_pil", "image_pil": im} for im in ims]) for (text, _), ims in zip(CHATS, images)]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> Family:
    return FAMILIES[request.param]


@pytest.fixture(scope="module")
def model_dir(family: Family, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return family.write_checkpoint(tmp_path_factory.mktemp("checkpoint"))


@pytest.fixture(scope="module")
def images() -> list[list[Image.Image]]:
    return [[random_image(w, h, seed=10 * i + j) for j, (w, h) in enumerate(sizes)]
            for i, (_, sizes) in enumerate(CHATS)]


@pytest.fixture(scope="module")
def processor(model_dir: Path) -> Any:
    return AutoProcessor.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def requests(images: list[list[Image.Image]], processor: Any) -> list[Any]:
    """HF's processor's prompt tokens and image inputs of each chat."""
    return [chat_inputs(processor, user(text, [{"type": "image"}] * len(ims)), ims)
            for (text, _), ims in zip(CHATS, images)]


@pytest.fixture(scope="module")
def reference(model_dir: Path, requests: list[Any]) -> list[list[int]]:
    device = open_device("host")
    try:
        return greedy_direct(model_dir, device, requests, max_tokens=MAX_TOKENS, max_batch_size=SIZES["max_num_seqs"],
                             block_size=SIZES["block_size"], max_model_len=SIZES["max_model_len"])
    finally:
        close_device(device)


@pytest.fixture(scope="module")
def whole(model_dir: Path, images: list[list[Image.Image]]) -> list[Any]:
    """The engine's chat outputs, each prompt prefilled whole."""
    with LLM(str(model_dir), backend="host", **SIZES) as llm:
        return llm.chat(chats(images), GREEDY, use_tqdm=False)


def test_chat_and_generate_equal_the_class_driven_directly(family: Family, model_dir: Path,
                                                           images: list[list[Image.Image]], processor: Any,
                                                           requests: list[Any], reference: list[list[int]],
                                                           whole: list[Any]) -> None:
    with LLM(str(model_dir), backend="host", **SIZES) as llm:
        prompts = [{"prompt": processor.apply_chat_template(user(text, [{"type": "image"}] * len(ims)),
                                                            add_generation_prompt=True, tokenize=False),
                    **({"multi_modal_data": {"image": ims}} if ims else {})} for (text, _), ims in zip(CHATS, images)]
        generated = llm.generate(prompts, GREEDY, use_tqdm=False)
        with pytest.raises(ValueError, match=f"1 {family.placeholder} tokens for 2 images"):
            llm.generate({"prompt": prompts[1]["prompt"], "multi_modal_data": {"image": images[2]}})
        with pytest.raises(ValueError, match="Not an image"):
            llm.generate({"prompt": prompts[1]["prompt"], "multi_modal_data": {"image": "cat.png"}})
    assert [list(o.prompt_token_ids) for o in whole] == [request[0] for request in requests]
    assert [list(o.prompt_token_ids) for o in generated] == [request[0] for request in requests]
    assert [list(o.outputs[0].token_ids) for o in whole] == reference
    assert [list(o.outputs[0].token_ids) for o in generated] == reference


@pytest.mark.parametrize("run", ["chunks-through-images", "preempted-recomputed"])
def test_chunked_prefill_and_recomputation_rerun_the_images(family: Family, model_dir: Path,
                                                            images: list[list[Image.Image]], whole: list[Any],
                                                            run: str) -> None:
    config = family.chunked if run == "chunks-through-images" else family.preempted
    with LLM(str(model_dir), backend="host", **(SIZES | config)) as llm:
        outputs = llm.chat(chats(images), GREEDY, use_tqdm=False)
    if run == "preempted-recomputed":
        assert sum(o.metrics.num_preemptions for o in outputs) > 0
    for i, (got, ref) in enumerate(zip(outputs, whole)):
        got, ref = got.outputs[0].token_ids, ref.outputs[0].token_ids
        k = next((k for k, (a, b) in enumerate(zip(got, ref)) if a != b), None)
        if k is not None:
            top = whole[i].outputs[0].logprobs[k]
            margin = top[ref[k]].logprob - top.get(got[k], top[ref[k]]).logprob
            print(f"\nrequest {i}: differs from the whole prefill at token {k}, margin {margin:.4f}")
            assert got[k] in top and margin < NEAR_TIE, f"request {i}: not a near-tie at token {k}"
