"""Bad images get a 400 with OpenAI's error body naming the problem, streamed or not (the image loads before any
event is sent), and the image model then answers the next request normally."""

from __future__ import annotations

import io
import socket
from collections.abc import Callable

import openai
import pytest
from PIL import Image

from tests.server.image_cases import MLLAMA, PNG, QUESTION, SHORT_MAX_TOKENS, data_url, image_chat, image_part
from tt_models.server import images
from tt_models.server.images import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS

pytestmark = pytest.mark.slow


def too_many_pixels() -> bytes:
    """One pixel column over the limit, as a few KB of PNG (PIL's own bomb check is far higher)."""
    buffer = io.BytesIO()
    Image.new("1", (MAX_IMAGE_PIXELS // 4096 + 1, 4096)).save(buffer, format="PNG")
    return buffer.getvalue()


def chat(*parts: dict, system: str | None = None) -> dict:
    messages = [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return {"model": MLLAMA, "max_tokens": SHORT_MAX_TOKENS, "temperature": 0, "messages": messages}


def url_chat(path: str) -> Callable[[str], dict]:
    return lambda host: chat(image_part(f"{host}{path}"))


CASES = {  # name: (the request body, given the image host's URL; words the message must contain)
    "not-an-image": (lambda host: chat(image_part(data_url(b"<html>no image here</html>"))),
                     "Not an image: PIL cannot read the 26 bytes from the data: URL"),
    "truncated-png": (lambda host: chat(image_part(data_url(PNG[:100]))), "Not an image: PIL cannot decode"),
    "bad-base64": (lambda host: chat(image_part("data:image/png;base64,iVBOR*w0")), "not valid base64"),
    "data-url-without-comma": (lambda host: chat(image_part("data:image/png;base64")), "no ','"),
    "too-many-bytes": (lambda host: chat(image_part(data_url(bytes(MAX_IMAGE_BYTES + 1)))),
                       "over the limit of 20 MiB"),
    "too-many-pixels": (lambda host: chat(image_part(data_url(too_many_pixels()))), "is 4097x4096, over the limit"),
    "two-images": (lambda host: chat(image_part(data_url(PNG)), image_part(data_url(PNG))),
                   "takes at most 1 image per request, got 2"),
    "url-not-found": (url_chat("/missing.png"), "gave HTTP 404"),
    "url-declares-too-many-bytes": (url_chat("/big-declared"), "over the limit of 20 MiB"),
    "url-streams-too-many-bytes": (url_chat("/big-streamed"), "over the limit of 20 MiB"),
    "file-url": (lambda host: chat(image_part("file:///etc/hostname")), "(see --allowed-local-media-path)"),
    "ftp-url": (lambda host: chat(image_part("ftp://127.0.0.1/image.png")), "a data: URL or an http(s):// URL"),
    "invalid-url": (lambda host: chat(image_part("http://0177.0.0.1/image.png")), "InvalidURL: Invalid IPv4 address"),
    "image-part-without-url": (lambda host: chat({"type": "image_url"}), "image_url content part needs image_url"),
    "audio-part": (lambda host: chat({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}),
                   "only text and image_url content parts are supported, got 'input_audio'"),
    "image-with-system-message": (lambda host: chat(image_part(data_url(PNG)), system="Be brief."),
                                  "incompatible with system messages"),  # the checkpoint's template says so
}


def assert_refused(http, body: dict, words: str) -> None:
    for stream in (False, True):
        response = http.post("/v1/chat/completions", json={**body, "stream": stream})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert words in error["message"] and error["type"] == "invalid_request_error", error


def assert_a_good_request_works(client, image_references) -> None:
    good = client.chat.completions.create(model=MLLAMA, messages=image_chat(data_url(PNG)),
                                          max_tokens=SHORT_MAX_TOKENS, temperature=0)
    assert good.choices[0].message.content == image_references.short.outputs[0].text


@pytest.mark.parametrize("name", CASES)
def test_bad_image_then_a_good_request(name, mllama_http, mllama_client, image_host, image_references):
    body, words = CASES[name]
    assert_refused(mllama_http, body(image_host.url), words)
    assert_a_good_request_works(mllama_client, image_references)


def test_an_unreachable_image_url(mllama_http, mllama_client, image_references):
    with socket.socket() as reserved:  # bound, never listening: connections to it are refused
        reserved.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{reserved.getsockname()[1]}/image.png"
        assert_refused(mllama_http, chat(image_part(url)), f"Could not fetch the image at {url}")
    assert_a_good_request_works(mllama_client, image_references)


def test_a_slow_image_url_times_out(monkeypatch, mllama_http, mllama_client, image_host, image_references):
    monkeypatch.setattr(images, "FETCH_TIMEOUT_S", 0.5)  # the server runs in this process
    url = f"{image_host.url}/slow"
    assert_refused(mllama_http, chat(image_part(url)), f"The image at {url} did not arrive within 0.5 s")
    assert_a_good_request_works(mllama_client, image_references)


@pytest.mark.parametrize("stream", [False, True])
def test_an_image_token_without_an_image_in_a_completion(stream, mllama_client, image_references):
    """Only raw prompts can miscount: chat writes the image token from the image parts."""
    with pytest.raises(openai.BadRequestError, match=r"1 <\|image\|> tokens for 0 images"):
        mllama_client.completions.create(model=MLLAMA, prompt=f"<|image|>{QUESTION}", max_tokens=SHORT_MAX_TOKENS,
                                         stream=stream)
    assert_a_good_request_works(mllama_client, image_references)
