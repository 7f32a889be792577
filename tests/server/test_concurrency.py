"""64 concurrent streams of every kind of input; 10 closed after their first chunk are aborted and their blocks
freed."""

from __future__ import annotations

import asyncio
import itertools
import time

import openai
import pytest

from tests.server.cases import BART, BART_MAX_TOKENS, BART_PROMPTS, CHATS, LLAMA, MAX_TOKENS, PROMPTS, WHISPER
from tt_models.testing.metrics import metric

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

CLOSED_MAX_TOKENS = 200  # streams closed early would run long: aborting them is what frees the batch


async def chat(client, messages, max_tokens, close_early):
    stream = await client.chat.completions.create(model=LLAMA, messages=messages, max_tokens=max_tokens,
                                                  temperature=0, stream=True)
    return await collect(stream, close_early, lambda c: c.choices[0].delta.content or "" if c.choices else "")


async def completion(client, model, prompt, max_tokens, close_early):
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                             stream=True)
    return await collect(stream, close_early, lambda c: c.choices[0].text if c.choices else "")


async def transcription(client, wav):
    stream = await client.audio.transcriptions.create(model=WHISPER, file=("speech.wav", wav, "audio/wav"),
                                                      stream=True)
    return await collect(stream, False, lambda e: e.delta if e.type == "transcript.text.delta" else "")


async def collect(stream, close_early, text_of):
    text = ""
    async for chunk in stream:
        text += text_of(chunk)
        if close_early:
            await stream.close()  # the client goes away mid-stream
            return None
    return text


# A stream closed mid-iteration leaves the openai client's httpx generators suspended; the garbage collector finalizes
# them wherever it next runs (say, the server's engine thread, in this process) and Python reports that as an
# unraisable exception of the client's, not the server's (seen once in a CI-like run). Only that one is ignored:
# every other unraisable exception still fails the test (tests/conftest.py).
@pytest.mark.filterwarnings("ignore:Exception ignored in. <async_generator object BoundAsyncStream"
                            ":pytest.PytestUnraisableExceptionWarning")
def test_64_mixed_streams_and_10_disconnects(server, references, http):
    before = http.get("/metrics").text
    jobs, expected = [], []
    chats, prompts, barts, wavs = (itertools.cycle(enumerate(x)) for x in (CHATS, PROMPTS, BART_PROMPTS,
                                                                           references.wavs))

    def add(job, text):
        jobs.append(job)
        expected.append(text)

    for _ in range(11):
        i, messages = next(chats)
        add(lambda c, m=messages: chat(c, m, MAX_TOKENS, False), references.chats[i].outputs[0].text)
        i, prompt = next(prompts)
        add(lambda c, p=prompt: completion(c, LLAMA, p, MAX_TOKENS, False), references.completions[i].outputs[0].text)
    for k in range(5):
        add(lambda c, m=CHATS[k % len(CHATS)]: chat(c, m, CLOSED_MAX_TOKENS, True), None)
        add(lambda c, p=PROMPTS[k % len(PROMPTS)]: completion(c, LLAMA, p, CLOSED_MAX_TOKENS, True), None)
    for _ in range(24):
        i, prompt = next(barts)
        add(lambda c, p=prompt: completion(c, BART, p, BART_MAX_TOKENS, False), references.bart[i].outputs[0].text)
    for _ in range(8):
        i, wav = next(wavs)
        add(lambda c, w=wav: transcription(c, w), references.speech[i].outputs[0].text.strip())
    assert len(jobs) == 64 and expected.count(None) == 10

    async def run_all():
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)
        async with client:
            return await asyncio.gather(*(job(client) for job in jobs))

    assert asyncio.run(run_all()) == expected

    # Every block is back and nothing is left queued once the server has seen the 10 disconnects.
    deadline = time.monotonic() + 60
    while True:
        text = http.get("/metrics").text
        idle = all(metric(text, name, model_name=model) == 0
                   for model in (LLAMA, BART, WHISPER)
                   for name in ("tt_models:kv_blocks_in_use", "vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                                "vllm:num_requests_waiting", "tt_models:num_requests_swapped"))
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert idle, text
    aborted = (metric(text, "vllm:request_success_total", model_name=LLAMA, finished_reason="abort")
               - metric(before, "vllm:request_success_total", 0.0, model_name=LLAMA, finished_reason="abort"))
    assert aborted == 10
    generated = (metric(text, "vllm:generation_tokens_total", model_name=BART)
                 - metric(before, "vllm:generation_tokens_total", 0.0, model_name=BART))
    assert generated == sum(len(references.bart[i % len(BART_PROMPTS)].outputs[0].token_ids) for i in range(24))
    transcribed = (metric(text, "vllm:time_to_first_token_seconds_count", model_name=WHISPER)
                   - metric(before, "vllm:time_to_first_token_seconds_count", 0.0, model_name=WHISPER))
    assert transcribed == 8
