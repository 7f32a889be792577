"""``tt-models serve`` with the image models of TT vLLM's V1 image path, the tiny Qwen2.5-VL and Gemma 3, both served
by one app: the ``openai`` client's chat with a base64 ``image_url`` and an http one (from tests/server/image_host.py
on 127.0.0.1, which the media policy is told to allow), streamed and not, equals the offline engine's ``LLM.chat`` on
the same images; bad images get Llama 3.2 Vision's 400s, a fifth image the models' limit."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import openai
import pytest

from tests.server.cases import ServerThread
from tests.server.image_cases import data_url, image_bytes, image_chat
from tests.server.image_host import ImageHost
from tt_models import LLM, SamplingParams
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server import create_app
from tt_models.server.media_policy import MediaPolicy
from tt_models.testing.gemma3 import write_tiny_gemma3_checkpoint
from tt_models.testing.qwen2_5_vl import write_tiny_qwen2_5_vl_checkpoint

pytestmark = pytest.mark.slow
# Each model's checkpoint writer and the placeholder its prompts hold per image.
MODELS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "tiny-qwen2.5-vl": (write_tiny_qwen2_5_vl_checkpoint, "<|vision_start|><|image_pad|><|vision_end|>"),
    "tiny-gemma3": (write_tiny_gemma3_checkpoint, "<start_of_image>")}
MAX_TOKENS, QUESTION = 8, "Is there a cat on the table?"
CONFIG = dict(block_size=32, max_num_seqs=4, max_model_len=256)


def image_pair(seed: int) -> list[bytes]:
    """A landscape and a portrait image."""
    return [image_bytes(seed, "PNG", (200, 120)), image_bytes(seed + 1, "PNG", (60, 180))]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {model: write(tmp_path_factory.mktemp(model)) for model, (write, _) in MODELS.items()}


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    return image_pair(4)


@pytest.fixture(scope="module")
def image_host(images: list[bytes]) -> ImageHost:
    with ImageHost({"/second.png": images[1]}) as host:
        yield host


@pytest.fixture(scope="module")
def offline(model_dirs: dict[str, Path], images: list[bytes]) -> dict[str, str]:
    """Each model's answer about the images, checked to depend on them (another pair gets another answer)."""
    answers = {}
    for model, model_dir in model_dirs.items():
        with LLM(str(model_dir), backend="host", **CONFIG) as llm:
            out, other = llm.chat([image_chat(*(data_url(im) for im in ims), question=QUESTION)
                                   for ims in (images, image_pair(0))],
                                  SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True),
                                  use_tqdm=False)
        assert out.outputs[0].text.strip() and out.outputs[0].text != other.outputs[0].text, model
        answers[model] = out.outputs[0].text
    return answers


@pytest.fixture(scope="module")
def client(model_dirs: dict[str, Path]) -> openai.OpenAI:
    engines = {model: LLMEngine.from_model(str(model_dir), EngineConfig(**CONFIG), backend="host")
               for model, model_dir in model_dirs.items()}
    app = create_app(engines, media_policy=MediaPolicy(allow_private=True))  # the image host is loopback
    with ServerThread(app, loop="asyncio") as running:
        yield openai.OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=300)
    for engine in engines.values():
        engine.close()


@pytest.mark.parametrize("model", MODELS)
def test_image_chat_streamed_and_not_equals_the_engine(client: openai.OpenAI, images: list[bytes],
                                                       image_host: ImageHost, offline: dict[str, str],
                                                       model: str) -> None:
    messages = image_chat(data_url(images[0]), f"{image_host.url}/second.png", question=QUESTION)
    args = dict(model=model, messages=messages, temperature=0, max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True})
    assert client.chat.completions.create(**args).choices[0].message.content == offline[model]
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(**args,
                                                                                                      stream=True))
    assert streamed == offline[model]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("urls", "message"), [
    ([data_url(b"<html>no image here</html>")], "Not an image: PIL cannot read the 26 bytes from the data: URL"),
    ([data_url(image_bytes(2, "PNG", (56, 56)))] * 5, "takes at most 4 images per request, got 5"),
    (["/missing.png"], "gave HTTP 404")], ids=["not-an-image", "five-images", "http-404"])
def test_bad_images_get_a_400(client: openai.OpenAI, image_host: ImageHost, urls: list[str], message: str,
                              model: str) -> None:
    urls = [f"{image_host.url}{url}" if url.startswith("/") else url for url in urls]
    with pytest.raises(openai.BadRequestError, match=message):
        client.chat.completions.create(model=model, messages=image_chat(*urls), max_tokens=2)


@pytest.mark.parametrize("model", MODELS)
def test_a_placeholder_without_an_image_in_a_completion(client: openai.OpenAI, model: str) -> None:
    """Only raw prompts can miscount: chat writes the placeholder from the image parts."""
    placeholder = MODELS[model][1]
    with pytest.raises(openai.BadRequestError, match="1 .* tokens for 0 images"):
        client.completions.create(model=model, prompt=f"{placeholder}{QUESTION}", max_tokens=2)
