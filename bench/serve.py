"""Load generator for the OpenAI-compatible server: TTFT, TPOT and throughput at several concurrencies.

At each concurrency C it sends ``--rounds * C`` streamed requests (chat, or completions), at most C in flight,
each generating exactly ``--max-tokens`` tokens (``ignore_eos``), and reports per-request TTFT (send to first
text chunk) and TPOT ((last chunk - first chunk) / (tokens - 1)) percentiles, requests/s and output tokens/s
over the level's wall time. A warmup request runs first.

    .venv/bin/python bench/serve.py --model smollm2-135m-instruct           # starts `tt-models serve` itself
    .venv/bin/python bench/serve.py --url http://127.0.0.1:8000 --served-model smollm2-135m-instruct
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openai

from tt_models.testing.server_process import wait_healthy

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a transformer language model works.",
    "List some good habits for writing clean code.",
    "Describe the water cycle to a child.",
    "What should I pack for a week of hiking?",
    "Summarize the plot of a detective novel you like.",
    "Give me three ideas for a birthday party.",
    "Why is the sky blue?",
]


@dataclass
class Sample:
    ttft: float
    tpot: float | None
    tokens: int


async def one_request(client: openai.AsyncOpenAI, args: argparse.Namespace, index: int) -> Sample:
    prompt = PROMPTS[index % len(PROMPTS)]
    common = dict(model=args.served_model, max_tokens=args.max_tokens, temperature=0, stream=True,
                  stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    start = time.perf_counter()
    if args.endpoint == "chat":
        stream = await client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **common)
        text_of = lambda chunk: chunk.choices[0].delta.content if chunk.choices else None  # noqa: E731
    else:
        stream = await client.completions.create(prompt=prompt, **common)
        text_of = lambda chunk: chunk.choices[0].text if chunk.choices else None  # noqa: E731
    first = last = None
    tokens = 0
    async for chunk in stream:
        if text_of(chunk):
            last = time.perf_counter()
            first = first or last
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    if first is None:
        raise RuntimeError(f"request {index} produced no text")
    return Sample(first - start, (last - first) / (tokens - 1) if tokens > 1 else None, tokens)


async def run_level(client: openai.AsyncOpenAI, args: argparse.Namespace, concurrency: int) -> dict:
    gate = asyncio.Semaphore(concurrency)

    async def gated(index: int) -> Sample:
        async with gate:
            return await one_request(client, args, index)

    start = time.perf_counter()
    samples = await asyncio.gather(*(gated(i) for i in range(args.rounds * concurrency)))
    wall = time.perf_counter() - start
    ttft = np.array([s.ttft for s in samples]) * 1000
    tpot = np.array([s.tpot for s in samples if s.tpot is not None]) * 1000
    return {"concurrency": concurrency, "requests": len(samples), "wall_s": wall,
            "req_per_s": len(samples) / wall, "out_tok_per_s": sum(s.tokens for s in samples) / wall,
            "ttft_ms": np.percentile(ttft, [50, 90, 99]), "tpot_ms": np.percentile(tpot, [50, 90, 99])}


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    print(f"\n{args.served_model}: {args.endpoint}, {args.max_tokens} output tokens per request")
    header = (f"{'conc':>4} {'reqs':>5} {'wall s':>7} {'req/s':>6} {'out tok/s':>9} | "
              f"{'TTFT p50':>8} {'p90':>7} {'p99':>7} ms | {'TPOT p50':>8} {'p90':>7} {'p99':>7} ms")
    print(header)
    print("-" * len(header))
    for r in rows:
        ttft, tpot = r["ttft_ms"], r["tpot_ms"]
        print(f"{r['concurrency']:>4} {r['requests']:>5} {r['wall_s']:>7.1f} {r['req_per_s']:>6.3f} "
              f"{r['out_tok_per_s']:>9.2f} | {ttft[0]:>8.0f} {ttft[1]:>7.0f} {ttft[2]:>7.0f}    | "
              f"{tpot[0]:>8.0f} {tpot[1]:>7.0f} {tpot[2]:>7.0f}")


@contextmanager
def started_server(args: argparse.Namespace) -> Iterator[str]:
    """``tt-models serve`` in a subprocess, sized for the largest concurrency; stopped on exit."""
    port = args.port
    command = [sys.executable, "-m", "tt_models.server.cli", "serve", args.model, "--served-model-name",
               args.served_model, "--port", str(port), "--max-num-seqs", str(min(max(args.concurrency), 32)),
               "--log-level", "warning", *args.server_args]
    print("starting:", " ".join(command), flush=True)
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, seconds=600)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=120)


async def bench(url: str, args: argparse.Namespace) -> list[dict]:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=3600)
    async with client:
        await one_request(client, args, 0)  # warmup
        rows = []
        for concurrency in args.concurrency:
            rows.append(await run_level(client, args, concurrency))
            print(f"concurrency {concurrency}: {rows[-1]['wall_s']:.1f} s", flush=True)
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="a running server")
    target.add_argument("--model", help="start `tt-models serve MODEL` for the run")
    parser.add_argument("--served-model", help="the model name in requests (default: --model)")
    parser.add_argument("--port", type=int, default=8765, help="port of the started server")
    parser.add_argument("--server-args", nargs=argparse.REMAINDER, default=[],
                        help="the rest goes to `tt-models serve` (e.g. --optimizations accuracy)")
    parser.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--rounds", type=int, default=2, help="requests per level = rounds x concurrency")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    args.served_model = args.served_model or args.model
    if args.served_model is None:
        parser.error("--url needs --served-model")
    if args.url:
        rows = asyncio.run(bench(args.url, args))
    else:
        with started_server(args) as url:
            rows = asyncio.run(bench(url, args))
    print_table(rows, args)


if __name__ == "__main__":
    main()
