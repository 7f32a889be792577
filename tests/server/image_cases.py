"""What the image chat tests send to a tiny Llama 3.2 Vision, and the offline engine runs that give their expected
outputs: the checkpoint's own chat template rendered here, the image decoded here, ``LLMEngine`` in-process."""

from __future__ import annotations

import base64
import io
from pathlib import Path

from PIL import Image

from tests.server.cases import greedy, offline_generate
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput
from tt_models.testing.images import random_image

MLLAMA = "tiny-mllama"
IMAGE_MAX_TOKENS = 12
SHORT_MAX_TOKENS = 4  # the good request after each bad one
QUESTION = "What is in this image?"
DATE = {"date_string": "26 Jul 2024"}  # the template dates prompts without images: fixed, so both runs agree


def load_mllama(path: Path) -> LLMEngine:
    """The server's engine and the offline one: the same settings (host backend, accuracy profile)."""
    return LLMEngine.from_model(str(path), EngineConfig(block_size=64, max_num_seqs=8, max_model_len=256),
                                backend="host", optimizations="accuracy")


def image_bytes(seed: int, fmt: str, size: tuple[int, int] = (80, 60)) -> bytes:
    """A random image encoded by PIL (``fmt``: "PNG", "JPEG", ...); seeds 1 and 2 give the tiny model different
    answers."""
    buffer = io.BytesIO()
    random_image(*size, seed=seed).save(buffer, format=fmt)
    return buffer.getvalue()


PNG, JPEG = image_bytes(1, "PNG"), image_bytes(2, "JPEG")


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def image_chat(*image_urls: str, question: str = QUESTION) -> list[dict]:
    """OpenAI messages: one user turn, the images first, then the question."""
    return [{"role": "user", "content": [*(image_part(url) for url in image_urls), {"type": "text", "text": question}]}]


def offline_chat(engine: LLMEngine, image: bytes | None, max_tokens: int, question: str = QUESTION) -> RequestOutput:
    """The engine's greedy answer to ``question`` about ``image`` (None: a text-only chat), the prompt rendered by
    the checkpoint's chat template with HF's content parts, the image decoded by PIL."""
    content = [{"type": "text", "text": question}]
    if image is not None:
        content.insert(0, {"type": "image"})
    text = engine.tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                add_generation_prompt=True, **DATE)
    prompt = {"prompt": text}
    if image is not None:
        prompt["multi_modal_data"] = {"image": Image.open(io.BytesIO(image)).convert("RGB")}
    [output] = offline_generate(engine, [prompt], greedy(max_tokens, logprobs=0))
    return output
