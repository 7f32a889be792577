"""The real TT vLLM plugin serving tt-models' Qwen2.5-VL with image prompts on the host backend: ``vllm.LLM.chat``
with PIL images goes through vLLM's own Qwen2.5-VL processor (registered on the TT class), the plugin's
``pixel_values`` / ``image_grid_thw`` gathering and its M-RoPE deltas; greedy tokens equal the class driven
directly with HF's processor of the same checkpoint (tests/models/qwen2_5_vl_direct.py).

One engine start (chat_scenario.py in a fresh process, the engine core in it) serves every conversation: one image,
two images of other sizes, text only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from transformers import AutoProcessor

from tests.models.qwen2_5_vl_checkpoint import write_tiny_qwen2_5_vl_checkpoint
from tests.models.qwen2_5_vl_direct import chat_inputs, greedy_direct
from tests.models.qwen2_5_vl_reference import random_image
from tests.vllm.chat_scenario import MARKER
from tt_models.runtime import close_device, mock, open_device

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).with_name("chat_scenario.py")
SIZES = dict(max_tokens=6, block_size=32, max_num_seqs=4, max_model_len=256)
# (text, images as (width, height)): landscape 8 x 14 patches, then it beside a portrait 12 x 4; text only.
CHATS = [("What is in this image?", [(200, 120)]), ("Compare the two pictures.", [(200, 120), (60, 180)]),
         ("Hello, how are you today?", [])]


def messages(text: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def png(image: Image.Image, path: Path) -> str:
    image.save(path, format="PNG")
    return str(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_qwen2_5_vl_checkpoint(tmp_path_factory.mktemp("tiny-qwen2.5-vl"))


@pytest.fixture(scope="module")
def images() -> list[list[Image.Image]]:
    return [[random_image(w, h, seed=10 * i + j) for j, (w, h) in enumerate(sizes)] for i, (_, sizes) in
            enumerate(CHATS)]


def run_vllm(model_dir: Path, images: list[list[Image.Image]], workdir: Path) -> subprocess.Popen:
    """chat_scenario.py started (not awaited): the engine core in its process, as ``vllm serve`` runs it."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VLLM_PLUGINS", "MESH_DEVICE", "TT_VISIBLE_DEVICES", mock.MOCK_ENV_VAR)}
    environ |= {"TT_MODELS_BACKEND": "host", "MESH_DEVICE": "N150", "VLLM_CACHE_ROOT": str(workdir / "vllm-cache")}
    conversations = [messages(text, [{"type": "image_png", "path": png(im, workdir / f"{i}-{j}.png")}
                                     for j, im in enumerate(ims)])
                     for i, ((text, _), ims) in enumerate(zip(CHATS, images))]
    arguments = json.dumps({"model": str(model_dir), "conversations": conversations, **SIZES})
    return subprocess.Popen([sys.executable, str(SCENARIO), arguments], cwd=workdir, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_chat_with_images_equals_the_class_driven_directly(model_dir: Path, images: list[list[Image.Image]],
                                                            tmp_path: Path) -> None:
    processor = AutoProcessor.from_pretrained(model_dir)
    requests = [chat_inputs(processor, messages(text, [{"type": "image"}] * len(ims)), ims)
                for (text, _), ims in zip(CHATS, images)]
    with run_vllm(model_dir, images, tmp_path) as process:
        try:
            device = open_device("host")  # the reference runs while vLLM starts
            try:
                reference = greedy_direct(model_dir, device, requests, max_tokens=SIZES["max_tokens"],
                                          max_batch_size=SIZES["max_num_seqs"], block_size=SIZES["block_size"],
                                          max_model_len=SIZES["max_model_len"])
            finally:
                close_device(device)
            stdout, stderr = process.communicate(timeout=400)
        except BaseException:
            process.kill()
            raise
    assert process.returncode == 0, f"vLLM failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
    report = json.loads([line for line in stdout.splitlines() if line.startswith(MARKER)][-1].removeprefix(MARKER))
    print(f"vLLM startup {report['startup_s']} s, chat {report['generate_s']} s")
    assert report["prompt_token_ids"] == [tokens for tokens, _, _ in requests]  # vLLM's processor expands as HF's
    assert report["tokens"] == reference
    assert "Traceback" not in stderr, stderr[-6000:]
