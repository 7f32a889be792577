"""``LLM.chat``'s conversations as engine prompts: vLLM's message format through the model's chat template.

Content is a string or a list of parts: ``{"type": "text", "text": ...}``, ``{"type": "image_pil", "image_pil":
PIL.Image}`` or ``{"type": "image_url", "image_url": {"url": "data:image/...;base64,..."}}`` (offline: inline
images only; the server also fetches http URLs). The template sees each image as an ``{"type": "image"}`` part and
writes the model's placeholder for it; the images go to the engine as ``multi_modal_data``.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image, UnidentifiedImageError
from transformers import PreTrainedTokenizerBase

from tt_models.engine.prompts import PromptType, TextPrompt, TokensPrompt

Conversation = Sequence[Mapping[str, Any]]


def conversation_prompt(tokenizer: PreTrainedTokenizerBase | None, messages: Conversation, *,
                        add_generation_prompt: bool = True, **template_kwargs: Any) -> PromptType:
    """The templated conversation, tokenized without special tokens (the template has them, as vLLM does it), or
    with images the template's text and the images (the engine tokenizes it the same way)."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("The model has no chat template: use generate")
    images: list[Image.Image] = []
    rendered = [_for_template(message, images) for message in messages]
    text = tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         **template_kwargs)
    if images:
        return TextPrompt(prompt=text, multi_modal_data={"image": images})
    return TokensPrompt(prompt_token_ids=tokenizer.encode(text, add_special_tokens=False), prompt=text)


def _for_template(message: Mapping[str, Any], images: list[Image.Image]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    parts = []
    for part in content:
        kind = part.get("type")
        if kind == "image_pil":
            images.append(_pil(part["image_pil"]))
        elif kind == "image_url":
            url = part["image_url"]["url"] if isinstance(part["image_url"], Mapping) else part["image_url"]
            images.append(_data_url_image(url))
        else:
            parts.append(dict(part))
            continue
        parts.append({"type": "image"})
    return {**message, "content": parts}


def _pil(image: Any) -> Image.Image:
    if not isinstance(image, Image.Image):
        raise ValueError(f"An image_pil part must hold a PIL.Image.Image, got {type(image).__name__}")
    return image


def _data_url_image(url: str) -> Image.Image:
    head, _, data = url.partition(",")
    if not (head.startswith("data:image/") and head.endswith(";base64")):
        raise ValueError("LLM.chat takes inline images (data:image/...;base64,...) or image_pil parts; "
                         f"fetching {url[:40]!r} is the server's job")
    try:
        image = Image.open(io.BytesIO(base64.b64decode(data, validate=True)))
        image.load()
    except (binascii.Error, UnidentifiedImageError, OSError) as error:
        raise ValueError(f"Not a readable image: {error}") from error
    return image.convert("RGB")
