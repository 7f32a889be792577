"""``vllm bench serve`` at concurrency 64 (twice the server's 32 sequences) while a second client opens streams and
closes them after a few chunks: vLLM's client must see no failed request, and once both are done the server must hold
no KV block and run nothing (read from its ``/metrics``)."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import openai

from serve_vs_vllm_clients import Load, vllm_bench_serve

LOAD = Load("completions", 128, 32, 64)
CANCELLED = 32  # streams the second client closes mid-way
CHUNKS_BEFORE_CLOSING = 4
IDLE_WITHIN_S = 60.0


def idle_state(url: str, name: str) -> dict[str, float]:
    """The server's KV blocks in use and requests running or waiting, from its Prometheus text."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    wanted = {"tt_models:kv_blocks_in_use", "vllm:num_requests_running", "vllm:num_requests_waiting"}
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.split("{")[0] in wanted and f'model_name="{name}"' in line}


async def _cancel_streams(url: str, name: str) -> int:
    """Open ``CANCELLED`` streams, 8 at a time, each closed after ``CHUNKS_BEFORE_CLOSING`` chunks; how many were."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    gate = asyncio.Semaphore(8)

    async def one(index: int) -> bool:
        async with gate:
            stream = await client.completions.create(model=name, prompt=f"Story number {index}:", max_tokens=500,
                                                     stream=True, extra_body={"ignore_eos": True})
            chunks = 0
            async for _ in stream:
                chunks += 1
                if chunks == CHUNKS_BEFORE_CLOSING:
                    await stream.close()
                    return True
            return False

    async with client:
        return sum(await asyncio.gather(*(one(i) for i in range(CANCELLED))))


def cancellations_under_load(url: str, name: str, directory: Path, out: Path, env: dict[str, str]) -> dict[str, Any]:
    """Both clients at once; vLLM's client's result with ``cancelled`` (streams closed mid-way), ``idle_after_s`` (the
    seconds until nothing ran and no block was held) or ``error``."""
    cancelled: list[int] = []
    canceller = threading.Thread(target=lambda: cancelled.append(asyncio.run(_cancel_streams(url, name))))
    canceller.start()
    result = vllm_bench_serve(url, name, directory, LOAD, out, prompts=2 * LOAD.concurrency, env=env)
    canceller.join()
    result["cancelled"] = cancelled[0] if cancelled else 0
    start = time.monotonic()
    while any(idle_state(url, name).values()):
        if time.monotonic() - start > IDLE_WITHIN_S:
            result["error"] = f"not idle {IDLE_WITHIN_S:.0f} s after the load: {idle_state(url, name)}"
            return result
        time.sleep(0.5)
    result["idle_after_s"] = time.monotonic() - start
    if result["cancelled"] != CANCELLED:
        result["error"] = f"{result['cancelled']} of {CANCELLED} streams were closed mid-way"
    return result
