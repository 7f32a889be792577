"""The image+text families' engine and vLLM tests, written once: a family's ``test_*_llm.py`` declares an
:class:`ImageChatFamily`, binds ``family = family_fixture(ITS_FAMILY)`` and the shared fixtures and tests to names of
its own (pytest collects them there, under that module's name); its ``test_*_vllm.py`` binds the same fixtures and
:func:`test_vllm_chat_with_images_equals_the_class_driven_directly`.

The checks, on a tiny checkpoint directory with its processor files (host backend): ``LLM.chat`` with image messages
and ``LLM.generate`` with ``multi_modal_data`` give HF's processor's prompt tokens and the greedy tokens of the class
driven directly with them (:mod:`tests.models.prompt_image_direct`); chunked prefill with chunk boundaries inside the
images' tokens gives them too; the real TT vLLM plugin's ``vllm.LLM.chat`` with the same PIL images gives them too
(one fresh process runs the engine, ``tests/vllm/chat_scenario.py``, the engine core its child: heavy, it takes the
machine for about half a minute).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from transformers import AutoProcessor

from tests.models import prompt_image_direct
from tests.vllm.chat_scenario import MARKER
from tt_models import LLM, SamplingParams
from tt_models.runtime import close_device, mock, open_device
from tt_models.testing.images import random_image

SCENARIO = Path(__file__).parents[1] / "vllm" / "chat_scenario.py"


@dataclass(frozen=True)
class ImageChatFamily:
    name: str  # the checkpoint's model_type (prompt_image_direct.CLASSES' key)
    write_checkpoint: Callable[[Path], Path]  # the tiny checkpoint directory with its processor files
    generator: type  # the class TT vLLM's plugin calls
    # (text, images as (width, height)): text only, one image, two images of different sizes.
    chats: list[tuple[str, list[tuple[int, int]]]]
    sizes: dict[str, int]  # the engine's max_num_seqs, block_size, max_model_len
    max_tokens: int
    # What HF's processor's prompt tokens of the chats must show (the family's image tokens laid out live).
    requests_check: Callable[[list[prompt_image_direct.Request]], bool]
    refused: str | None = None  # the error a prompt with fewer placeholders than its images raises, where checked

    @property
    def greedy(self) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=self.max_tokens, ignore_eos=True)


def user(text: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def family_fixture(declared: ImageChatFamily) -> Any:
    """The fixture ``family`` of a module that runs the shared fixtures and tests for ``declared``."""
    @pytest.fixture(scope="module", name="family")
    def family() -> ImageChatFamily:
        return declared
    return family


@pytest.fixture(scope="module")
def model_dir(family: ImageChatFamily, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return family.write_checkpoint(tmp_path_factory.mktemp(f"tiny-{family.name}"))


@pytest.fixture(scope="module")
def images(family: ImageChatFamily) -> list[list[Any]]:
    return [[random_image(w, h, seed=10 * i + j) for j, (w, h) in enumerate(sizes)]
            for i, (_, sizes) in enumerate(family.chats)]


@pytest.fixture(scope="module")
def requests(family: ImageChatFamily, model_dir: Path, images: list[list[Any]]) -> list[prompt_image_direct.Request]:
    processor = AutoProcessor.from_pretrained(model_dir)
    return [prompt_image_direct.chat_inputs(processor, user(text, [{"type": "image"}] * len(ims)), ims)
            for (text, _), ims in zip(family.chats, images)]


@pytest.fixture(scope="module")
def reference(family: ImageChatFamily, model_dir: Path, requests: list[prompt_image_direct.Request]) -> list[list[int]]:
    device = open_device("host")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(prompt_image_direct.CLASSES, family.name, family.generator)
            return prompt_image_direct.greedy_direct(model_dir, device, requests, max_tokens=family.max_tokens,
                                                     max_batch_size=family.sizes["max_num_seqs"],
                                                     block_size=family.sizes["block_size"],
                                                     max_model_len=family.sizes["max_model_len"])
    finally:
        close_device(device)


def pil_chats(family: ImageChatFamily, images: list[list[Any]]) -> list[list[dict[str, Any]]]:
    return [user(text, [{"type": "image_pil", "image_pil": im} for im in ims])
            for (text, _), ims in zip(family.chats, images)]


def test_chat_and_generate_equal_the_class_driven_directly(family, model_dir, images, requests, reference):
    assert family.requests_check(requests)
    with LLM(str(model_dir), backend="host", **family.sizes) as llm:
        chatted = llm.chat(pil_chats(family, images), family.greedy, use_tqdm=False)
        processor = AutoProcessor.from_pretrained(model_dir)
        prompts = [{"prompt": processor.apply_chat_template(user(text, [{"type": "image"}] * len(ims)),
                                                            add_generation_prompt=True, tokenize=False),
                    **({"multi_modal_data": {"image": ims}} if ims else {})}
                   for (text, _), ims in zip(family.chats, images)]
        generated = llm.generate(prompts, family.greedy, use_tqdm=False)
        if family.refused is not None:
            with pytest.raises(ValueError, match=family.refused):
                llm.generate({"prompt": prompts[1]["prompt"], "multi_modal_data": {"image": images[2]}})
    for outputs in (chatted, generated):
        assert [list(o.prompt_token_ids) for o in outputs] == [tokens for tokens, _ in requests]
        assert [list(o.outputs[0].token_ids) for o in outputs] == reference


def test_chunks_through_the_images(family, model_dir, images, reference):
    """Chunks of 8 tokens: the image prompts' chunks end inside their images' tokens."""
    with LLM(str(model_dir), backend="host", **family.sizes, max_num_batched_tokens=8) as llm:
        outputs = llm.chat(pil_chats(family, images), family.greedy, use_tqdm=False)
    assert [list(o.outputs[0].token_ids) for o in outputs] == reference


def test_vllm_chat_with_images_equals_the_class_driven_directly(family, model_dir, images, requests, reference,
                                                                 tmp_path):
    conversations = []
    for i, ((text, _), ims) in enumerate(zip(family.chats, images)):
        paths = [tmp_path / f"{i}-{j}.png" for j in range(len(ims))]
        for image, path in zip(ims, paths):
            image.save(path, format="PNG")
        conversations.append(user(text, [{"type": "image_png", "path": str(path)} for path in paths]))
    arguments = {"runs": [{"model": str(model_dir), "conversations": conversations}],
                 "max_tokens": family.max_tokens, **family.sizes}
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VLLM_PLUGINS", "MESH_DEVICE", "TT_VISIBLE_DEVICES", mock.MOCK_ENV_VAR)}
    environ |= {"TT_MODELS_BACKEND": "host", "MESH_DEVICE": "N150", "VLLM_CACHE_ROOT": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(SCENARIO), json.dumps(arguments)], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"vLLM failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    (report,) = json.loads([line for line in done.stdout.splitlines()
                            if line.startswith(MARKER)][-1].removeprefix(MARKER))
    print(f"vLLM startup {report['startup_s']} s, chat {report['generate_s']} s")
    assert report["prompt_token_ids"] == [tokens for tokens, _ in requests]
    assert report["tokens"] == reference
    assert "Traceback" not in done.stderr, done.stderr[-6000:]
