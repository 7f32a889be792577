"""A disaggregated deployment as a user starts it: Redis, ``tt-models serve --role ...`` and ``tt-models proxy``
processes on loopback ports, and the requests the tests send through it."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import soundfile

from tt_models.audio import speech_sample
from tt_models.testing.server_process import free_port, wait_healthy

BART, WHISPER = "bart", "whisper"
MODEL_ARGS = ["--max-num-seqs", "16", "--max-model-len", "256", "--backend", "host", "--optimizations", "accuracy",
              "--log-level", "warning"]
TRANSFER_TIMEOUT = 15.0  # seconds; --transfer-timeout of every instance (5 s failed requests on a loaded machine)
BART_MAX_TOKENS = 8


class Process:
    """A ``tt-models`` command in its own process, its output in a log file."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, "OMP_NUM_THREADS": "1"}  # several processes share 2 cores
        with open(log, "wb") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "tt_models.server.cli", *args, "--port",
                                             str(self.port)], stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_healthy(self) -> None:
        wait_healthy(self.url, self.process, self.log, seconds=240)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def terminate(self) -> None:
        """Asks it to stop (SIGTERM: a graceful stop), without waiting."""
        if self.process.poll() is None:
            self.process.terminate()

    def stop(self) -> None:
        self.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text


def serve(bart_dir: Path, log: Path, *args: str) -> Process:
    return Process(["serve", str(bart_dir), "whisper-tiny.en", "--served-model-name", BART, WHISPER, *MODEL_ARGS,
                    "--transfer-timeout", str(TRANSFER_TIMEOUT), *args], log)


def proxy(encode: list[Process], prefill_decode: list[Process], log: Path) -> Process:
    return Process(["proxy", "--encode", *(p.url for p in encode), "--prefill-decode",
                    *(p.url for p in prefill_decode), "--log-level", "warning"], log)


def speech_clips() -> list[bytes]:
    """The real call whole, then each of its reference segments, as WAV files."""
    audio, rate, segments = speech_sample()
    pieces = [audio] + [audio[int(s.start * rate):int(s.end * rate)] for s in segments]
    clips = []
    for piece in pieces:
        buffer = io.BytesIO()
        soundfile.write(buffer, piece, rate, format="WAV")
        clips.append(buffer.getvalue())
    return clips


def bart_prompts(count: int) -> list[str]:
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 9)) for i in range(count)]


@dataclass(frozen=True)
class Result:
    text: str | None = None
    status: int | None = None  # an HTTP error's status
    seconds: float = 0.0


async def transcribe(client: openai.AsyncOpenAI, wav: bytes, stream: bool) -> Result:
    start = time.monotonic()
    try:
        if not stream:
            reply = await client.audio.transcriptions.create(model=WHISPER, file=("speech.wav", wav, "audio/wav"))
            return Result(reply.text, seconds=time.monotonic() - start)
        events = await client.audio.transcriptions.create(model=WHISPER, file=("speech.wav", wav, "audio/wav"),
                                                         stream=True)
        deltas, done = [], None
        async for event in events:
            if event.type == "transcript.text.delta":
                deltas.append(event.delta)
            else:
                done = event.text
        assert done == "".join(deltas), "the streamed deltas do not add up to the final text"
        return Result(done, seconds=time.monotonic() - start)
    except openai.APIStatusError as error:
        return Result(status=error.status_code, seconds=time.monotonic() - start)


async def complete(client: openai.AsyncOpenAI, prompt: str, stream: bool) -> Result:
    start = time.monotonic()
    try:
        if not stream:
            reply = await client.completions.create(model=BART, prompt=prompt, max_tokens=BART_MAX_TOKENS,
                                                    temperature=0.0)
            return Result(reply.choices[0].text, seconds=time.monotonic() - start)
        chunks = await client.completions.create(model=BART, prompt=prompt, max_tokens=BART_MAX_TOKENS,
                                                 temperature=0.0, stream=True)
        return Result("".join([c.choices[0].text async for c in chunks if c.choices]),
                      seconds=time.monotonic() - start)
    except openai.APIStatusError as error:
        return Result(status=error.status_code, seconds=time.monotonic() - start)


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


def run_workload(url: str, clips: list[bytes], prompts: list[str], *, stream: bool,
                 seconds: float = 600) -> list[Result]:
    """All clips and prompts at once; the results in that order (speech first)."""
    async def main() -> list[Result]:
        api = client(url)
        work = [transcribe(api, clip, stream) for clip in clips] + [complete(api, p, stream) for p in prompts]
        try:
            return await asyncio.wait_for(asyncio.gather(*work), seconds)
        finally:
            await api.close()

    return asyncio.run(main())
