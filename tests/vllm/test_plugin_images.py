"""The real TT vLLM plugin serving tt-models' Qwen2.5-VL and Gemma 3 with image prompts on the host backend:
``vllm.LLM.chat`` with PIL images goes through vLLM's own processor of each (registered on the TT class) and the
plugin's ``pixel_values`` gathering (Qwen2.5-VL: with ``image_grid_thw`` and its M-RoPE deltas); the prompt tokens
equal HF's processor's and the greedy tokens the class driven directly with them (tests/models/qwen2_5_vl_direct.py,
tests/models/gemma3_direct.py).

One process (chat_scenario.py, fresh, the engine cores its children) starts one engine per model in turn, each
serving every conversation: one image, two images of other sizes, text only.
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

from tests.models import gemma3_direct, qwen2_5_vl_direct
from tests.models.gemma3_checkpoint import write_tiny_gemma3_checkpoint
from tests.models.qwen2_5_vl_checkpoint import write_tiny_qwen2_5_vl_checkpoint
from tests.models.qwen2_5_vl_reference import random_image
from tests.vllm.chat_scenario import MARKER
from tests.vllm.test_plugin_host import inspected
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
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return [write_tiny_qwen2_5_vl_checkpoint(tmp_path_factory.mktemp("tiny-qwen2.5-vl")),
            write_tiny_gemma3_checkpoint(tmp_path_factory.mktemp("tiny-gemma3"))]


@pytest.fixture(scope="module")
def vllm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM's own classes of both architectures inspected in one process (a vLLM subprocess each in the engine's
    startup otherwise; ours, imported by then, it inspects in its process)."""
    return inspected(tmp_path_factory.mktemp("vllm-cache"), ["Qwen2_5_VLForConditionalGeneration",
                                                             "Gemma3ForConditionalGeneration"])


@pytest.fixture(scope="module")
def images() -> list[list[Image.Image]]:
    return [[random_image(w, h, seed=10 * i + j) for j, (w, h) in enumerate(sizes)] for i, (_, sizes) in
            enumerate(CHATS)]


def run_vllm(model_dirs: list[Path], images: list[list[Image.Image]], workdir: Path,
             cache: Path) -> subprocess.Popen:
    """chat_scenario.py started (not awaited) on each model in turn: the engine core in its process, as ``vllm
    serve`` runs it."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VLLM_PLUGINS", "MESH_DEVICE", "TT_VISIBLE_DEVICES", mock.MOCK_ENV_VAR)}
    environ |= {"TT_MODELS_BACKEND": "host", "MESH_DEVICE": "N150", "VLLM_CACHE_ROOT": str(cache)}
    conversations = [messages(text, [{"type": "image_png", "path": png(im, workdir / f"{i}-{j}.png")}
                                     for j, im in enumerate(ims)])
                     for i, ((text, _), ims) in enumerate(zip(CHATS, images))]
    runs = [{"model": str(model_dir), "conversations": conversations} for model_dir in model_dirs]
    arguments = json.dumps({"runs": runs, **SIZES})
    return subprocess.Popen([sys.executable, str(SCENARIO), arguments], cwd=workdir, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_chat_with_images_equals_the_class_driven_directly(model_dirs: list[Path], images: list[list[Image.Image]],
                                                            vllm_cache: Path, tmp_path: Path) -> None:
    drivers = [qwen2_5_vl_direct, gemma3_direct]  # in model_dirs' order
    requests = [[driver.chat_inputs(AutoProcessor.from_pretrained(model_dir),
                                    messages(text, [{"type": "image"}] * len(ims)), ims)
                 for (text, _), ims in zip(CHATS, images)] for driver, model_dir in zip(drivers, model_dirs)]
    with run_vllm(model_dirs, images, tmp_path, vllm_cache) as process:
        try:
            device = open_device("host")  # the references run while vLLM starts
            try:
                references = [driver.greedy_direct(
                    model_dir, device, model_requests, max_tokens=SIZES["max_tokens"],
                    max_batch_size=SIZES["max_num_seqs"], block_size=SIZES["block_size"],
                    max_model_len=SIZES["max_model_len"])
                    for driver, model_dir, model_requests in zip(drivers, model_dirs, requests)]
            finally:
                close_device(device)
            stdout, stderr = process.communicate(timeout=400)
        except BaseException:
            process.kill()
            raise
    assert process.returncode == 0, f"vLLM failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
    reports = json.loads([line for line in stdout.splitlines() if line.startswith(MARKER)][-1].removeprefix(MARKER))
    for model_dir, report, model_requests, reference in zip(model_dirs, reports, requests, references):
        print(f"{model_dir.name}: vLLM startup {report['startup_s']} s, chat {report['generate_s']} s")
        # vLLM's processor expands as HF's (Gemma 3: one <bos>, the template's)
        assert report["prompt_token_ids"] == [request[0] for request in model_requests], model_dir.name
        assert report["tokens"] == reference, model_dir.name
    assert "Traceback" not in stderr, stderr[-6000:]
