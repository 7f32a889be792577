"""The inputs the server tests send, the offline engine runs that give their expected outputs, and helpers."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Sequence

import numpy as np
import soundfile
import uvicorn
from fastapi import FastAPI

from tt_models import SamplingParams
from tt_models.audio import load_audio, speech_sample
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput
from tt_models.testing.server_process import free_port

LLAMA, BART, WHISPER = "smollm2", "tiny-bart", "whisper-tiny.en"
MAX_TOKENS = 8  # SmolLM2 runs about a second per step on 2 cores: short outputs keep the suite short
BART_MAX_TOKENS = 12

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Name a primary color."}],
    [{"role": "user", "content": "Write one word that rhymes with cat."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Count to three."}],
]
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "1, 2, 3, 4,"]
TOKENS_PROMPT_TEXT = "The largest planet is"
BART_PROMPTS = ["Hello world", "The quick brown fox", "tt-models serves BART", "One two three four five"]
BART_EXPLICIT = ("The quick brown fox", "jumps")  # (encoder prompt, decoder prompt)
SPEECH_CONTEXT = "Diane in New Jersey; Sheila in Texas, originally from Chicago."  # a transcription prompt
SAMPLED = dict(n=3, temperature=0.8, top_k=50, seed=7)  # seeded: each sequence draws from seed + its index
SEGMENTS = (3, 5)  # indices into the speech sample's reference segments: two sentences of the call


def greedy(max_tokens: int | None, **kwargs) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kwargs)


def offline_generate(engine: LLMEngine, prompts: Sequence, params: SamplingParams,
                     **kwargs: str) -> list[RequestOutput]:
    """What ``tt_models.LLM.generate`` does (all prompts queued, steps until done), on an engine that the server
    takes over afterwards: each model is loaded once per session."""
    ids = [f"offline-{time.monotonic_ns()}-{i}" for i in range(len(prompts))]
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, params, **kwargs)
    finished = {}
    while engine.has_unfinished_requests():
        finished.update((o.request_id, o) for o in engine.step() if o.finished)
    return [finished[request_id] for request_id in ids]


def chat_prompt(tokenizer, messages: list[dict]) -> dict:
    """The conversation as the offline engine takes it: the chat template's text, tokenized as is."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    return {"prompt_token_ids": tokenizer.encode(text, add_special_tokens=False)}


def speech_wavs() -> list[bytes]:
    """The chosen segments of the real two-speaker call, each as the bytes of a 16-bit WAV file."""
    audio, rate, segments = speech_sample()
    wavs = []
    for index in SEGMENTS:
        segment = segments[index]
        buffer = io.BytesIO()
        soundfile.write(buffer, audio[int(segment.start * rate):int(segment.end * rate)], rate, format="WAV")
        wavs.append(buffer.getvalue())
    return wavs


def whisper_prompt(wav: bytes) -> dict:
    """The upload as the server decodes it, so both runs see the same samples."""
    return {"prompt": "", "multi_modal_data": {"audio": (load_audio(wav, 16000), 16000)}}


class ServerThread:
    """A real uvicorn server on 127.0.0.1 in a background thread of the test process; ``loop`` as uvicorn takes it
    ("asyncio": its connections go through Python's ``socket`` module, where a test can watch them)."""

    def __init__(self, app: FastAPI, loop: str = "auto") -> None:
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    loop=loop))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


def silence_wav(seconds: float) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(int(seconds * 16000), dtype=np.float32), 16000, format="WAV")
    return buffer.getvalue()
