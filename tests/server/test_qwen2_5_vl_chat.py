"""``tt-models serve`` with the tiny Qwen2.5-VL: the ``openai`` client's chat with two base64 ``image_url`` parts,
streamed and not, equals the offline engine's ``LLM.chat`` on the same images; a bad image gets Llama 3.2 Vision's
400, and a fifth image the model's limit."""

from __future__ import annotations

import io
from pathlib import Path

import openai
import pytest
from PIL import Image

from tests.models.qwen2_5_vl_checkpoint import write_tiny_qwen2_5_vl_checkpoint
from tests.models.qwen2_5_vl_reference import random_image
from tests.server.cases import ServerThread
from tests.server.image_cases import data_url, image_chat
from tt_models import LLM, SamplingParams
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server import create_app

pytestmark = pytest.mark.slow
MODEL, MAX_TOKENS, QUESTION = "tiny-qwen2.5-vl", 8, "Compare the two pictures."
CONFIG = dict(block_size=32, max_num_seqs=4, max_model_len=256)


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_qwen2_5_vl_checkpoint(tmp_path_factory.mktemp("tiny-qwen2.5-vl"))


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    return [random_image(200, 120, seed=0), random_image(60, 180, seed=1)]


@pytest.fixture(scope="module")
def offline(model_dir: Path, images: list[Image.Image]) -> str:
    with LLM(str(model_dir), backend="host", **CONFIG) as llm:
        [out] = llm.chat(image_chat(*(data_url(png(im)) for im in images), question=QUESTION),
                         SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True), use_tqdm=False)
    return out.outputs[0].text


@pytest.fixture(scope="module")
def client(model_dir: Path) -> openai.OpenAI:
    engine = LLMEngine.from_model(str(model_dir), EngineConfig(**CONFIG), backend="host")
    with ServerThread(create_app({MODEL: engine}), loop="asyncio") as running:
        yield openai.OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=300)
    engine.close()


def test_image_chat_streamed_and_not_equals_the_engine(client: openai.OpenAI, images: list[Image.Image],
                                                       offline: str) -> None:
    messages = image_chat(*(data_url(png(im)) for im in images), question=QUESTION)
    args = dict(model=MODEL, messages=messages, temperature=0, max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True})
    assert client.chat.completions.create(**args).choices[0].message.content == offline
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(**args,
                                                                                                      stream=True))
    assert streamed == offline


@pytest.mark.parametrize(("urls", "message"), [
    ([data_url(b"<html>no image here</html>")], "Not an image: PIL cannot read the 26 bytes from the data: URL"),
    ([data_url(png(random_image(56, 56, seed=2)))] * 5, "takes at most 4 images per request, got 5")])
def test_bad_images_get_a_400(client: openai.OpenAI, urls: list[str], message: str) -> None:
    with pytest.raises(openai.BadRequestError, match=message):
        client.chat.completions.create(model=MODEL, messages=image_chat(*urls), max_tokens=2)
