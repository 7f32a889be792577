"""Through the official OpenAI client, chat with an image (a base64 PNG or JPEG, or an http:// URL) on a tiny Llama
3.2 Vision answers as the offline engine does for the same rendered prompt and image, streamed or not.

The requests run one at a time, as the references did: the same batches, so the same numbers.
"""

from __future__ import annotations

import pytest

from tests.server.image_cases import DATE, IMAGE_MAX_TOKENS, JPEG, MLLAMA, PNG, QUESTION, data_url, image_chat

pytestmark = pytest.mark.slow

GREEDY = dict(model=MLLAMA, max_tokens=IMAGE_MAX_TOKENS, temperature=0, logprobs=True)


def answer(client, messages: list[dict], stream: bool, **kwargs) -> dict:
    """What one chat request returns: text, finish reason, token counts and the logprob of each token (which
    moves with the image even where the tiny model's greedy tokens do not)."""
    if not stream:
        response = client.chat.completions.create(messages=messages, **GREEDY, **kwargs)
        choice = response.choices[0]
        return dict(text=choice.message.content, finish_reason=choice.finish_reason,
                    logprobs=[t.logprob for t in choice.logprobs.content], prompt_tokens=response.usage.prompt_tokens,
                    completion_tokens=response.usage.completion_tokens)
    chunks = list(client.chat.completions.create(messages=messages, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY, **kwargs))
    choices = [c.choices[0] for c in chunks if c.choices]
    assert choices[0].delta.role == "assistant"
    return dict(text="".join(c.delta.content or "" for c in choices), finish_reason=choices[-1].finish_reason,
                logprobs=[t.logprob for c in choices if c.logprobs for t in c.logprobs.content],
                prompt_tokens=chunks[-1].usage.prompt_tokens, completion_tokens=chunks[-1].usage.completion_tokens)


def expected(reference) -> dict:
    seq = reference.outputs[0]
    return dict(text=seq.text, finish_reason=seq.finish_reason,
                logprobs=[step[token].logprob for token, step in zip(seq.token_ids, seq.logprobs)],
                prompt_tokens=len(reference.prompt_token_ids), completion_tokens=len(seq.token_ids))


def test_the_references_tell_the_images_apart(image_references):
    """Else a server that swapped or dropped the image could still pass."""
    logprobs = [expected(r)["logprobs"] for r in (image_references.png, image_references.jpeg, image_references.text)]
    assert logprobs[0] != logprobs[1] and logprobs[0] != logprobs[2] and logprobs[1] != logprobs[2]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_base64_image(fmt, stream, mllama_client, image_references):
    url = data_url(PNG) if fmt == "png" else data_url(JPEG, "image/jpeg")
    assert answer(mllama_client, image_chat(url), stream) == expected(getattr(image_references, fmt))


def test_image_by_http_url(mllama_client, image_host, image_references):
    assert answer(mllama_client, image_chat(f"{image_host.url}/image.png"), False) == expected(image_references.png)


@pytest.mark.parametrize("content", ["string", "parts"])
def test_text_only_chat_on_the_image_model(content, mllama_client, image_references):
    messages = [{"role": "user", "content": QUESTION if content == "string" else [{"type": "text", "text": QUESTION}]}]
    assert answer(mllama_client, messages, content == "parts", extra_body={"chat_template_kwargs": DATE}) \
        == expected(image_references.text)
