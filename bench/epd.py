"""Encoder disaggregation against one instance: requests/s and TTFT of proxy + 1 encode + 1 prefill-decode
instance, and of one ``both`` instance, on the same workload and machine, side by side with their ratio.

The workload: ``--requests`` streamed transcriptions of the real call's segments (Whisper tiny.en, host backend,
accuracy profile), all sent at once. TTFT is send to first text delta. Each side gets a warmup request first.
It starts its own Redis server (``redis-server`` on PATH) and ``tt-models`` processes on loopback ports.

    .venv/bin/python bench/epd.py [--requests 32] [--model whisper-tiny.en] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import openai
import soundfile

from tt_models.audio import speech_sample
from tt_models.testing.server_process import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def started(command: list[str], log: Path, threads: int) -> Iterator[str]:
    """A ``tt-models`` command on a free port until the block ends; yields its URL once healthy."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "tt_models.server.cli", *command, "--port", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, log)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH (scripts/setup.sh installs it)")
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


def clips(count: int) -> list[bytes]:
    audio, rate, segments = speech_sample()
    out = []
    for i in range(count):
        segment = segments[i % len(segments)]
        buffer = io.BytesIO()
        soundfile.write(buffer, audio[int(segment.start * rate):int(segment.end * rate)], rate, format="WAV")
        out.append(buffer.getvalue())
    return out


async def one(client: openai.AsyncOpenAI, model: str, wav: bytes) -> float:
    start = time.monotonic()
    first = None
    events = await client.audio.transcriptions.create(model=model, file=("a.wav", wav, "audio/wav"), stream=True)
    async for event in events:
        if first is None and event.type == "transcript.text.delta":
            first = time.monotonic() - start
    return first if first is not None else time.monotonic() - start


async def measure(url: str, model: str, wavs: list[bytes]) -> dict:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=900)
    try:
        await one(client, model, wavs[0])  # warmup
        start = time.monotonic()
        ttfts = await asyncio.gather(*(one(client, model, wav) for wav in wavs))
        wall = time.monotonic() - start
    finally:
        await client.close()
    return {"req/s": len(wavs) / wall, "TTFT p50 s": float(np.percentile(ttfts, 50)),
            "TTFT p99 s": float(np.percentile(ttfts, 99)), "wall s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-tiny.en")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per instance (OMP_NUM_THREADS)")
    args = parser.parse_args()
    wavs = clips(args.requests)
    common = [args.model, "--served-model-name", "m", "--backend", "host", "--optimizations", "accuracy",
              "--max-num-seqs", "32", "--log-level", "warning"]
    logs = Path(tempfile.mkdtemp(prefix="bench-epd-"))
    with ExitStack() as stack:
        both = stack.enter_context(started(["serve", *common], logs / "both.log", args.threads))
        single = asyncio.run(measure(both, "m", wavs))
        stack.close()
        broker = stack.enter_context(redis_server())
        encode = stack.enter_context(started(["serve", *common, "--role", "encode", "--broker", broker],
                                             logs / "encode.log", args.threads))
        decode = stack.enter_context(started(["serve", *common, "--role", "prefill_decode", "--broker", broker],
                                             logs / "prefill_decode.log", args.threads))
        front = stack.enter_context(started(["proxy", "--encode", encode, "--prefill-decode", decode,
                                             "--log-level", "warning"], logs / "proxy.log", args.threads))
        split = asyncio.run(measure(front, "m", wavs))
    print(f"{args.requests} concurrent streamed transcriptions, {args.model}, host backend, "
          f"{os.cpu_count()} cores, {args.threads} torch thread(s) per instance, load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'':14}{'both':>10}{'1E+1PD':>10}{'ratio':>8}")
    for key in ("req/s", "TTFT p50 s", "TTFT p99 s", "wall s"):
        print(f"{key:14}{single[key]:10.3f}{split[key]:10.3f}{split[key] / single[key]:8.2f}")


if __name__ == "__main__":
    main()
