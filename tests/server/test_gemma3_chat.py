"""``tt-models serve`` with the tiny Gemma 3: the ``openai`` client's chat with a base64 ``image_url`` and an http one
(from tests/server/image_host.py on 127.0.0.1, which the media policy is told to allow), streamed and not, equals the
offline engine's ``LLM.chat`` on the same images; bad images get the other image models' 400s."""

from __future__ import annotations

import io
from pathlib import Path

import openai
import pytest
from PIL import Image

from tests.models.gemma3_checkpoint import write_tiny_gemma3_checkpoint
from tests.models.gemma3_reference import random_image
from tests.server.cases import ServerThread
from tests.server.image_cases import data_url, image_chat
from tests.server.image_host import ImageHost
from tt_models import LLM, SamplingParams
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server import create_app
from tt_models.server.media_policy import MediaPolicy

pytestmark = pytest.mark.slow
# A question whose answer from the tiny model shows in the text and depends on the images.
MODEL, MAX_TOKENS, QUESTION = "tiny-gemma3", 8, "Is there a cat on the table?"
CONFIG = dict(block_size=32, max_num_seqs=4, max_model_len=256)


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gemma3_checkpoint(tmp_path_factory.mktemp("tiny-gemma3"))


def image_pair(seed: int) -> list[bytes]:
    return [png(random_image(200, 120, seed=seed)), png(random_image(60, 180, seed=seed + 1))]


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    return image_pair(4)


@pytest.fixture(scope="module")
def image_host(images: list[bytes]) -> ImageHost:
    with ImageHost({"/second.png": images[1]}) as host:
        yield host


@pytest.fixture(scope="module")
def offline(model_dir: Path, images: list[bytes]) -> str:
    with LLM(str(model_dir), backend="host", **CONFIG) as llm:
        out, other = llm.chat([image_chat(*(data_url(im) for im in ims), question=QUESTION)
                               for ims in (images, image_pair(0))],
                              SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True), use_tqdm=False)
    assert out.outputs[0].text.strip() and out.outputs[0].text != other.outputs[0].text
    return out.outputs[0].text


@pytest.fixture(scope="module")
def client(model_dir: Path) -> openai.OpenAI:
    engine = LLMEngine.from_model(str(model_dir), EngineConfig(**CONFIG), backend="host")
    app = create_app({MODEL: engine}, media_policy=MediaPolicy(allow_private=True))  # the image host is loopback
    with ServerThread(app, loop="asyncio") as running:
        yield openai.OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=300)
    engine.close()


def test_image_chat_streamed_and_not_equals_the_engine(client: openai.OpenAI, images: list[bytes],
                                                       image_host: ImageHost, offline: str) -> None:
    messages = image_chat(data_url(images[0]), f"{image_host.url}/second.png", question=QUESTION)
    args = dict(model=MODEL, messages=messages, temperature=0, max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True})
    assert client.chat.completions.create(**args).choices[0].message.content == offline
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(**args,
                                                                                                      stream=True))
    assert streamed == offline


@pytest.mark.parametrize(("urls", "message"), [
    ([data_url(b"<html>no image here</html>")], "Not an image: PIL cannot read the 26 bytes from the data: URL"),
    ([data_url(png(random_image(56, 56, seed=2)))] * 5, "takes at most 4 images per request, got 5"),
    (["/missing.png"], "gave HTTP 404")])
def test_bad_images_get_a_400(client: openai.OpenAI, image_host: ImageHost, urls: list[str], message: str) -> None:
    urls = [f"{image_host.url}{url}" if url.startswith("/") else url for url in urls]
    with pytest.raises(openai.BadRequestError, match=message):
        client.chat.completions.create(model=MODEL, messages=image_chat(*urls), max_tokens=2)


def test_a_placeholder_without_an_image_in_a_completion(client: openai.OpenAI) -> None:
    """Only raw prompts can miscount: chat writes the placeholder from the image parts."""
    with pytest.raises(openai.BadRequestError, match="1 <start_of_image> tokens for 0 images"):
        client.completions.create(model=MODEL, prompt=f"<start_of_image>{QUESTION}", max_tokens=2)
