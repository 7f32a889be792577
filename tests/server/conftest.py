"""One real server for the session: SmolLM2-135M-Instruct, a tiny random BART and Whisper tiny.en on the host
backend, each engine loaded once. The expected outputs are the offline engine's, computed on those engines
before the server takes them over.

A second server, only for the image tests, serves a tiny random Llama 3.2 Vision; its expected outputs come from
a second engine on the same checkpoint, and its image URLs from a local HTTP server (a loopback address, which
that server is allowed to fetch from)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import openai
import pytest

from tests.server.cases import (BART, BART_EXPLICIT, BART_MAX_TOKENS, BART_PROMPTS, CHATS, LLAMA, MAX_TOKENS, PROMPTS,
                                SAMPLED, SPEECH_CONTEXT, TOKENS_PROMPT_TEXT, WHISPER, ServerThread, chat_prompt, greedy,
                                offline_generate, speech_wavs, whisper_prompt)
from tests.server.image_cases import (IMAGE_MAX_TOKENS, JPEG, MLLAMA, PNG, SHORT_MAX_TOKENS, load_mllama,
                                      offline_chat)
from tests.server.image_host import ImageHost
from tt_models import SamplingParams
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput
from tt_models.server import create_app
from tt_models.server.media_policy import MediaPolicy
from tt_models.testing.mllama import write_tiny_mllama_checkpoint
from tt_models.testing.seq2seq import save_tiny_bart


@dataclass(frozen=True)
class References:
    completions: list[RequestOutput]  # PROMPTS
    tokens_prompt: list[int]
    tokens: RequestOutput
    chats: list[RequestOutput]  # CHATS
    bart: list[RequestOutput]  # BART_PROMPTS
    bart_explicit: RequestOutput
    bart_stop: str
    bart_stopped: RequestOutput  # BART_PROMPTS[0] with stop=bart_stop
    bart_sampled: RequestOutput  # BART_PROMPTS[1] with SAMPLED
    wavs: list[bytes]
    speech: list[RequestOutput]  # wavs
    speech_prompted: RequestOutput  # wavs[0] after SPEECH_CONTEXT


@pytest.fixture(scope="session")
def bart_dir(tmp_path_factory):
    return save_tiny_bart(tmp_path_factory.mktemp("tiny-bart"))


@pytest.fixture(scope="session")
def engines(bart_dir):
    # "accuracy": bf16 weights, the cheaper profile on the host backend.
    def load(model, **config):
        return LLMEngine.from_model(str(model), EngineConfig(block_size=64, **config), backend="host",
                                    optimizations="accuracy")

    engines = {LLAMA: load("smollm2-135m-instruct", max_num_seqs=32, max_model_len=512),
               BART: load(bart_dir, max_num_seqs=32, max_model_len=128),
               WHISPER: load(WHISPER, max_num_seqs=8, max_model_len=128)}
    yield engines
    for engine in engines.values():
        engine.close()


@pytest.fixture(scope="session")
def references(engines) -> References:
    llama, bart, whisper = engines[LLAMA], engines[BART], engines[WHISPER]
    tokens_prompt = llama.tokenizer.encode(TOKENS_PROMPT_TEXT)
    llama_out = offline_generate(llama, [*PROMPTS, tokens_prompt, *(chat_prompt(llama.tokenizer, c) for c in CHATS)],
                                 greedy(MAX_TOKENS))
    bart_out = offline_generate(bart, [*BART_PROMPTS, dict(zip(("encoder_prompt", "decoder_prompt"), BART_EXPLICIT))],
                                greedy(BART_MAX_TOKENS))
    # A stop string from the middle of an output, so that a stream must hold back its start.
    text = bart_out[0].outputs[0].text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    [stopped] = offline_generate(bart, [BART_PROMPTS[0]], greedy(BART_MAX_TOKENS, stop=stop))
    assert stopped.outputs[0].finish_reason == "stop" and stopped.outputs[0].stop_reason == stop
    [sampled] = offline_generate(bart, [BART_PROMPTS[1]], SamplingParams(max_tokens=BART_MAX_TOKENS, logprobs=2,
                                                                          **SAMPLED))
    wavs = speech_wavs()
    speech = offline_generate(whisper, [whisper_prompt(w) for w in wavs], greedy(None))
    [speech_prompted] = offline_generate(whisper, [whisper_prompt(wavs[0])], greedy(None), previous_text=SPEECH_CONTEXT)
    n = len(PROMPTS)
    return References(llama_out[:n], tokens_prompt, llama_out[n], llama_out[n + 1:], bart_out[:-1], bart_out[-1],
                      stop, stopped, sampled, wavs, speech, speech_prompted)


@pytest.fixture(scope="session")
def server(engines, references):
    with ServerThread(create_app(engines)) as running:
        yield running


def _openai_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def _http_client(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=300)


@pytest.fixture(scope="session")
def client(server):
    return _openai_client(server)


@pytest.fixture(scope="session")
def http(server):
    with _http_client(server) as session:
        yield session


# The image tests.


@dataclass(frozen=True)
class ImageReferences:
    png: RequestOutput
    jpeg: RequestOutput
    text: RequestOutput  # the question without an image
    short: RequestOutput  # PNG with SHORT_MAX_TOKENS


@pytest.fixture(scope="session")
def mllama_dir(tmp_path_factory):
    return write_tiny_mllama_checkpoint(tmp_path_factory.mktemp("tiny-mllama"))


@pytest.fixture(scope="session")
def image_references(mllama_dir) -> ImageReferences:
    engine = load_mllama(mllama_dir)
    try:
        return ImageReferences(*(offline_chat(engine, image, IMAGE_MAX_TOKENS) for image in (PNG, JPEG, None)),
                               offline_chat(engine, PNG, SHORT_MAX_TOKENS))
    finally:
        engine.close()


@pytest.fixture(scope="session")
def mllama_server(mllama_dir):
    engine = load_mllama(mllama_dir)
    # Its image URLs are the local image host's, a loopback address; test_media_policy.py watches its connections.
    app = create_app({MLLAMA: engine}, media_policy=MediaPolicy(allow_private=True))
    with ServerThread(app, loop="asyncio") as running:
        yield running
    engine.close()


@pytest.fixture(scope="session")
def mllama_client(mllama_server):
    return _openai_client(mllama_server)


@pytest.fixture(scope="session")
def mllama_http(mllama_server):
    with _http_client(mllama_server) as session:
        yield session


@pytest.fixture(scope="session")
def image_host():
    with ImageHost({"/image.png": PNG}) as host:
        yield host
