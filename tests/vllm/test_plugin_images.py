"""The real TT vLLM plugin serving tt-models' Qwen2.5-VL and Gemma 3 with image prompts on the host backend:
``vllm.LLM.chat`` with PIL images goes through vLLM's own processor of each (registered on the TT class) and the
plugin's ``pixel_values`` gathering (Qwen2.5-VL: with ``image_grid_thw`` and its M-RoPE deltas); the prompt tokens
equal HF's processor's and the greedy tokens the class driven directly with them (tests/models/prompt_image_direct.py).

One process (chat_scenario.py, fresh, the engine cores its children) starts one engine per model in turn, each
serving every conversation: one image, two images of other sizes, text only.

The plugin's own ``examples/server_example_tt.py`` (vLLM's OpenAI server), one per model started side by side, serves
the same conversations to the ``openai`` client with the images as base64 PNG ``image_url`` parts, streamed and not:
the prompt and generated token ids (vLLM's ``return_token_ids``) are the same, and a part that is not an image is
vLLM's 400. The references are computed once, during the first test's vLLM startup.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import openai
import pytest
from PIL import Image
from transformers import AutoProcessor

from tests.models.prompt_image_direct import chat_inputs, greedy_direct
from tests.server.image_cases import data_url
from tests.vllm.chat_scenario import MARKER
from tests.vllm.test_plugin_examples import RUNNER, running_servers
from tests.vllm.test_plugin_host import inspected
from tt_models.runtime import close_device, mock, open_device
from tt_models.testing.gemma3 import write_tiny_gemma3_checkpoint
from tt_models.testing.images import random_image
from tt_models.testing.qwen2_5_vl import write_tiny_qwen2_5_vl_checkpoint

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).with_name("chat_scenario.py")
SIZES = dict(max_tokens=6, block_size=32, max_num_seqs=4, max_model_len=256)
# (text, images as (width, height)): landscape 8 x 14 patches, then it beside a portrait 12 x 4; text only.
CHATS = [("What is in this image?", [(200, 120)]), ("Compare the two pictures.", [(200, 120), (60, 180)]),
         ("Hello, how are you today?", [])]
NOT_AN_IMAGE = data_url(b"not an image")


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


@pytest.fixture(scope="module")
def chat_requests(model_dirs: list[Path], images: list[list[Image.Image]]) -> list[list[Any]]:
    """Each model's ``chat_inputs`` of every chat (HF's processor's prompt tokens and pixels)."""
    return [[chat_inputs(AutoProcessor.from_pretrained(model_dir), messages(text, [{"type": "image"}] * len(ims)), ims)
             for (text, _), ims in zip(CHATS, images)] for model_dir in model_dirs]


@pytest.fixture(scope="module")
def references(model_dirs: list[Path], chat_requests: list[list[Any]]) -> list[list[list[int]]]:
    """Each model's greedy tokens of every chat from its class driven directly. Each test asks for them
    (``request.getfixturevalue``) once its vLLM processes are starting: the first test computes them during that
    startup, the other reuses them."""
    device = open_device("host")
    try:
        return [greedy_direct(model_dir, device, model_requests, max_tokens=SIZES["max_tokens"],
                              max_batch_size=SIZES["max_num_seqs"], block_size=SIZES["block_size"],
                              max_model_len=SIZES["max_model_len"])
                for model_dir, model_requests in zip(model_dirs, chat_requests)]
    finally:
        close_device(device)


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
                                                            chat_requests: list[list[Any]], vllm_cache: Path,
                                                            request: pytest.FixtureRequest, tmp_path: Path) -> None:
    with run_vllm(model_dirs, images, tmp_path, vllm_cache) as process:
        try:
            references = request.getfixturevalue("references")  # while vLLM starts
            stdout, stderr = process.communicate(timeout=400)
        except BaseException:
            process.kill()
            raise
    assert process.returncode == 0, f"vLLM failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
    reports = json.loads([line for line in stdout.splitlines() if line.startswith(MARKER)][-1].removeprefix(MARKER))
    for model_dir, report, model_requests, reference in zip(model_dirs, reports, chat_requests, references):
        print(f"{model_dir.name}: vLLM startup {report['startup_s']} s, chat {report['generate_s']} s")
        # vLLM's processor expands as HF's (Gemma 3: one <bos>, the template's)
        assert report["prompt_token_ids"] == [inputs[0] for inputs in model_requests], model_dir.name
        assert report["tokens"] == reference, model_dir.name
    assert "Traceback" not in stderr, stderr[-6000:]


def png_url(image: Image.Image) -> str:
    """``image`` as an OpenAI ``image_url``: a base64 PNG data URL."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return data_url(buffer.getvalue())


def ask(url: str, model: str, chat: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    """One greedy chat completion (``ignore_eos``, as the references run) from the vLLM server at ``url``: the prompt
    and generated token ids (vLLM's ``return_token_ids``, fields it adds to OpenAI's: in a streamed answer, the
    prompt's in the first chunk and each chunk's new tokens), the text and why it ended."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
    answer = client.chat.completions.create(model=model, messages=chat, max_tokens=SIZES["max_tokens"], temperature=0,
                                            stream=stream, extra_body={"return_token_ids": True, "ignore_eos": True})
    if not stream:
        choice = answer.choices[0]
        return {"prompt": answer.prompt_token_ids, "tokens": choice.token_ids, "text": choice.message.content,
                "finish": choice.finish_reason}
    chunks = list(answer)
    choices = [chunk.choices[0] for chunk in chunks if chunk.choices]
    return {"prompt": chunks[0].prompt_token_ids,
            "tokens": [t for choice in choices for t in (choice.model_extra or {}).get("token_ids") or []],
            "text": "".join(choice.delta.content or "" for choice in choices),
            "finish": choices[-1].finish_reason}


@pytest.mark.heavy  # vLLM's server (its API process and engine core) beside another: most of the machine
def test_server_example_serves_image_chat_as_the_class_driven_directly(
        examples: Path, model_dirs: list[Path], images: list[list[Image.Image]], chat_requests: list[list[Any]],
        vllm_cache: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Both servers start at once, as TT's example runs them (``--max_model_len`` and ``--host`` go through the
    example's own arguments to vLLM's)."""
    sizes = ["--max_num_seqs", str(SIZES["max_num_seqs"]), "--block_size", str(SIZES["block_size"]),
             "--max_model_len", str(SIZES["max_model_len"]), "--host", "127.0.0.1"]
    servers = [([sys.executable, str(RUNNER), str(examples / "server_example_tt.py"), "--model", str(model_dir),
                 *sizes], tmp_path, tmp_path / f"{model_dir.name}.log") for model_dir in model_dirs]
    chats = [[{"role": "user", "content": [*({"type": "image_url", "image_url": {"url": png_url(image)}}
                                             for image in ims), {"type": "text", "text": text}]}]
             for (text, _), ims in zip(CHATS, images)]
    bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": NOT_AN_IMAGE}},
                                        {"type": "text", "text": CHATS[0][0]}]}]
    with running_servers(*servers, env={"VLLM_CACHE_ROOT": str(vllm_cache)},
                         meanwhile=lambda: request.getfixturevalue("references")) as urls:
        # First, so the answers below also show the server unharmed; chat 0 with this part's image is answered there.
        for url, model_dir in zip(urls, model_dirs):
            with pytest.raises(openai.BadRequestError):  # vLLM's 400
                ask(url, str(model_dir), bad, stream=False)
        # Every chat to both servers at once, not streamed, then streamed: no two requests in flight carry the same
        # image. vLLM 0.25.1's engine core can fail such a pair ("Expected a cached item for mm_hash", a 500 and the
        # engine dead): its processor cache sends an image it has processed before as a hash only, and the request
        # carrying the pixels can reach the engine after the one relying on it (a streamed request is added to the
        # engine only once its response starts).
        calls = [(url, str(model_dir), chat) for url, model_dir in zip(urls, model_dirs) for chat in chats]
        with ThreadPoolExecutor(len(calls)) as pool:
            plain, streamed = ([*pool.map(partial(ask, stream=stream), *zip(*calls))] for stream in (False, True))
    references = request.getfixturevalue("references")
    for i, (model_dir, model_requests, reference) in enumerate(zip(model_dirs, chat_requests, references)):
        own = slice(i * len(chats), (i + 1) * len(chats))
        print(f"{model_dir.name}: {[answer['text'] for answer in plain[own]]}")
        assert [answer["prompt"] for answer in plain[own]] == [inputs[0] for inputs in model_requests], model_dir.name
        assert [answer["tokens"] for answer in plain[own]] == reference, model_dir.name
        assert streamed[own] == plain[own], model_dir.name
