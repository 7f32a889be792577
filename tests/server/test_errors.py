"""Bad requests get OpenAI's error body with the right status and a message naming the problem; the server then
answers the next request normally."""

from __future__ import annotations

import json

import openai
import pytest

from tests.server.cases import BART, BART_MAX_TOKENS, BART_PROMPTS, LLAMA, WHISPER, silence_wav
from tests.server.image_cases import PNG, data_url, image_chat

pytestmark = pytest.mark.slow


def completion(**body):
    return {"json": {"model": BART, "prompt": "Hello", **body}}


def upload(model=WHISPER, audio=b"RIFF\x00\x00not really a wav file", **form):
    return {"files": {"file": ("speech.wav", audio, "audio/wav")}, "data": {"model": model, **form}}


CASES = {  # name: (path, request, status, words the message must contain)
    "malformed-json": ("/v1/completions", {"content": b'{"model": "tiny-bart", "prompt": ',
                                           "headers": {"content-type": "application/json"}},
                       400, "not valid JSON"),
    "body-not-an-object": ("/v1/completions", {"json": [1, 2]}, 400, "valid dictionary"),
    "missing-prompt": ("/v1/completions", {"json": {"model": BART}}, 400, "prompt: Field required"),
    "missing-model": ("/v1/completions", {"json": {"prompt": "Hello"}}, 400, "model: Field required"),
    "missing-messages": ("/v1/chat/completions", {"json": {"model": LLAMA}}, 400, "messages: Field required"),
    "missing-file": ("/v1/audio/transcriptions", {"data": {"model": WHISPER}}, 400, "file: Field required"),
    "wrong-type": ("/v1/completions", completion(max_tokens="many"), 400, "max_tokens"),
    "bad-temperature": ("/v1/completions", completion(temperature=5), 400, "temperature must be in [0, 2]"),
    "greedy-n": ("/v1/completions", completion(temperature=0, n=2), 400, "n must be 1 when using greedy"),
    "huge-seed": ("/v1/completions", completion(temperature=1.0, seed=2**64), 400, "seed must be in [-2**63, 2**64)"),
    "empty-prompt": ("/v1/completions", completion(prompt=""), 400, "prompt is empty"),
    "max-tokens-too-large": ("/v1/completions", completion(max_tokens=10**9), 400,
                             "'max_tokens' is too large: 1000000000. This model's maximum context length is 128 "
                             "tokens and your request has 2 input tokens (1000000000 > 128 - 2)."),
    "max-completion-tokens-too-large": ("/v1/chat/completions", {"json": {
        "model": LLAMA, "max_completion_tokens": 600, "messages": [{"role": "user", "content": "Hi"}]}}, 400,
        "'max_completion_tokens' is too large: 600. This model's maximum context length is 512 tokens"),
    "unknown-model": ("/v1/completions", completion(model="gpt-17"), 404, "`gpt-17` does not exist"),
    "unknown-chat-model": ("/v1/chat/completions", {"json": {"model": "gpt-17", "messages": [
        {"role": "user", "content": "Hi"}]}}, 404, "`gpt-17` does not exist"),
    "unknown-audio-model": ("/v1/audio/transcriptions", upload(model="gpt-17"), 404, "`gpt-17` does not exist"),
    "undecodable-audio": ("/v1/audio/transcriptions", upload(), 400, "Not audio libsndfile can decode"),
    "timestamps-as-text": ("/v1/audio/transcriptions", upload(audio=silence_wav(1), response_format="text", **{
        "timestamp_granularities[]": "segment"}), 400, "timestamp_granularities needs response_format verbose_json"),
    "translation-on-english-only": ("/v1/audio/translations", upload(audio=silence_wav(31)), 400, "English-only"),
    "language-on-english-only": ("/v1/audio/transcriptions", upload(audio=silence_wav(1), language="de"), 400,
                                 "English-only: it cannot take language='de'"),
    "prompt-too-long": ("/v1/completions", {"json": {"model": LLAMA, "prompt": "hello " * 600}}, 400,
                        "maximum model length of 512"),
    "encoder-prompt-too-long": ("/v1/completions", completion(prompt="hello " * 1100), 400,
                                "maximum encoder length of 1024"),
    "chat-without-template": ("/v1/chat/completions", {"json": {"model": BART, "messages": [
        {"role": "user", "content": "Hi"}]}}, 400, "has no chat template"),
    "image-on-text-model": ("/v1/chat/completions", {"json": {"model": LLAMA, "messages": image_chat(data_url(PNG))}},
                            400, "smollm2 does not take images"),
    "completion-on-whisper": ("/v1/completions", completion(model=WHISPER), 400, "use /v1/audio/transcriptions"),
    "audio-on-bart": ("/v1/audio/transcriptions", upload(model=BART), 400, "does not take audio"),
    "unknown-route": ("/v1/embeddings", completion(), 404, "Not Found"),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_request_then_a_good_one(name, http, client, references):
    path, request, status, words = CASES[name]
    response = http.post(path, **request)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words in error["message"]
    assert error["type"] == "invalid_request_error"

    good = client.completions.create(model=BART, prompt=BART_PROMPTS[0], max_tokens=BART_MAX_TOKENS, temperature=0)
    assert good.choices[0].text == references.bart[0].outputs[0].text


def test_an_upload_over_25_mib_is_a_413(http):
    """OpenAI's upload limit, checked before decoding: one byte over 25 MiB is refused on both audio routes, while
    25 MiB exactly gets as far as decoding (zeros are no audio format)."""
    limit = 25 * 2**20
    for route in ("transcriptions", "translations"):
        response = http.post(f"/v1/audio/{route}", **upload(audio=bytes(limit + 1)))
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["param"] == "file" and f"the limit is {limit}" in error["message"]
        assert error["type"] == "invalid_request_error"
    response = http.post("/v1/audio/transcriptions", **upload(audio=bytes(limit)))
    assert response.status_code == 400 and "Not audio libsndfile can decode" in response.json()["error"]["message"]


def test_the_openai_client_raises_its_typed_errors(client):
    with pytest.raises(openai.NotFoundError) as not_found:
        client.completions.create(model="gpt-17", prompt="Hi")
    assert not_found.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="maximum model length"):
        client.chat.completions.create(model=LLAMA, messages=[{"role": "user", "content": "hello " * 600}])
    with pytest.raises(openai.BadRequestError, match="presence_penalty"):
        client.completions.create(model=BART, prompt="Hi", presence_penalty=3)


def test_a_bad_streamed_request_fails_before_streaming(http):
    # Only text content parts are served: the refusal comes as a status, not as an event of a begun stream.
    body = {"model": LLAMA, "stream": True, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]}
    response = http.post("/v1/chat/completions", content=json.dumps(body),
                         headers={"content-type": "application/json"})
    assert response.status_code == 400 and "only text content parts" in response.json()["error"]["message"]
