"""Soak run: one ``tt-models serve`` under a mixed load for ``--minutes``, its resources sampled, and a verdict.

The server (its own process, host backend) serves a tiny random BART (completions), SmolLM2-135M-Instruct (chat)
and Whisper tiny.en (transcriptions). ``--concurrency`` clients loop over a mix: chat, completions, streamed
completions read to the end, streams the client leaves after a few events (a disconnect), non-streamed requests it
gives up on before the answer (an abort), transcriptions, and bad requests (each must be a 4xx). Every ``--interval``
seconds it prints a CSV row (stdout; progress goes to stderr) of the server's RSS, open file descriptors, threads and
KV blocks in use. The warm-up (the first 20% of the run, at most 2 minutes) ends and the run ends with the load
paused until the server is idle, and those two idle samples are compared:

- RSS grew less than 5%; file descriptors and threads are back where they were (+-2); 0 KV blocks in use;
- no 5xx and no transport error for a good request, and every bad one a 4xx.

    .venv/bin/python bench/soak.py                  # 30 minutes
    .venv/bin/python bench/soak.py --minutes 1      # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import soundfile

from tt_models.audio import speech_sample
from tt_models.testing.metrics import metric
from tt_models.testing.seq2seq import save_tiny_bart
from tt_models.testing.server_process import free_port, wait_healthy

BART, CHAT, WHISPER = "bart", "smollm2", "whisper"
KINDS = ("chat", "completion", "stream", "disconnect", "abort", "transcription", "bad")
GOOD = ("chat", "completion", "stream", "transcription")  # answered in full: 200, never a 5xx
RSS_GROWTH, FLAT = 0.05, 2


@dataclass
class Sample:
    elapsed: float
    rss_mib: float
    fds: int
    threads: int
    kv_blocks: float
    requests: int
    failures: int

    def row(self) -> str:
        return (f"{self.elapsed:.0f},{self.rss_mib:.1f},{self.fds},{self.threads},{self.kv_blocks:.0f},"
                f"{self.requests},{self.failures}")


HEADER = "elapsed_s,rss_mib,open_fds,threads,kv_blocks_in_use,requests_done,failures"


class Load:
    """The clients' work and its tally: ``outcomes[kind, result]``, ``failures`` (a good request not answered 200,
    or a bad one not answered 4xx)."""

    def __init__(self, url: str, wav: bytes, kinds: tuple[str, ...] = KINDS, pause: float = 0.0) -> None:
        self.url, self.wav = url, wav
        self.kinds, self.pause = kinds, pause  # each client's mix, and its rest after each request
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
        self.failures = 0
        self.done = 0

    async def one(self, client: httpx.AsyncClient, kind: str, index: int) -> None:
        start = time.monotonic()
        try:
            result = await getattr(self, f"_{kind}")(client, index)
        except httpx.HTTPError as error:
            result = f"transport:{type(error).__name__}"
        self.outcomes[kind, result] += 1
        self.seconds[kind].append(time.monotonic() - start)
        self.done += 1
        if (kind in GOOD and result != "200") or (kind == "bad" and not result.startswith("4")):
            self.failures += 1
            print(f"soak: {kind} request answered {result}", file=sys.stderr)

    async def _chat(self, client: httpx.AsyncClient, index: int) -> str:
        body = {"model": CHAT, "max_tokens": 6, "temperature": 0.7, "seed": index,
                "messages": [{"role": "user", "content": f"Name a color, number {index}."}]}
        return str((await client.post("/v1/chat/completions", json=body)).status_code)

    async def _completion(self, client: httpx.AsyncClient, index: int) -> str:
        body = {"model": BART, "prompt": f"soak request {index}", "max_tokens": 16, "temperature": 0}
        return str((await client.post("/v1/completions", json=body)).status_code)

    async def _stream(self, client: httpx.AsyncClient, index: int) -> str:
        body = {"model": BART, "prompt": f"streamed {index}", "max_tokens": 24, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as reply:
            lines = [line async for line in reply.aiter_lines()]
        ended = lines[-2:] == ["data: [DONE]", ""] or lines[-1:] == ["data: [DONE]"]
        errored = any(line.startswith('data: {"error"') for line in lines)
        return str(reply.status_code) if ended and not errored else "stream-unfinished"

    async def _disconnect(self, client: httpx.AsyncClient, index: int) -> str:
        body = {"model": BART, "prompt": f"left {index}", "max_tokens": 400, "ignore_eos": True, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as reply:
            events = 0
            async for line in reply.aiter_lines():
                events += line.startswith("data: ")
                if events == 3:
                    break  # leaving the block closes the connection: the server aborts the request
        return "left"

    async def _abort(self, client: httpx.AsyncClient, index: int) -> str:
        body = {"model": BART, "prompt": f"aborted {index}", "max_tokens": 400, "ignore_eos": True}
        try:
            await client.post("/v1/completions", json=body, timeout=0.3)
        except httpx.TimeoutException:
            return "aborted"
        return "answered"

    async def _transcription(self, client: httpx.AsyncClient, index: int) -> str:
        files = {"file": ("speech.wav", self.wav, "audio/wav")}
        return str((await client.post("/v1/audio/transcriptions", data={"model": WHISPER}, files=files)).status_code)

    async def _bad(self, client: httpx.AsyncClient, index: int) -> str:
        bodies = [{"model": BART, "prompt": "x", "max_tokens": 10**9}, {"model": "nope", "prompt": "x"},
                  {"model": CHAT, "messages": "not a list"}, {"model": BART, "prompt": "x", "seed": 2**70},
                  {"model": BART, "prompt": "x", "temperature": -1}]
        if index % 6 == 5:
            reply = await client.post("/v1/completions", content=b"{not json",
                                      headers={"content-type": "application/json"})
        else:
            reply = await client.post("/v1/completions" if "prompt" in bodies[index % 5] else "/v1/chat/completions",
                                      json=bodies[index % 5])
        return str(reply.status_code)

    async def run(self, concurrency: int, until: float) -> None:
        """``concurrency`` clients until ``until`` (monotonic), each finishing its request in flight then."""
        async def client_loop(worker: int) -> None:
            async with httpx.AsyncClient(base_url=self.url, timeout=120) as client:
                index = worker
                while time.monotonic() < until:
                    await self.one(client, self.kinds[index % len(self.kinds)], index)
                    index += concurrency + 1  # co-prime with len(kinds) for most concurrencies: each client mixes
                    await asyncio.sleep(self.pause)
        await asyncio.gather(*(client_loop(worker) for worker in range(concurrency)))


def _proc(pid: int) -> tuple[float, int, int]:
    """RSS (MiB), open file descriptors and threads of process ``pid``, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(status["Threads"])


def sample(pid: int, url: str, load: Load, start: float, models: tuple[str, ...]) -> Sample:
    rss, fds, threads = _proc(pid)
    text = httpx.get(f"{url}/metrics", timeout=10).text
    blocks = sum(metric(text, "tt_models:kv_blocks_in_use", model_name=name) for name in models)
    return Sample(time.monotonic() - start, rss, fds, threads, blocks, load.done, load.failures)


async def soak(load: Load, pid: int, models: tuple[str, ...], *, minutes: float, interval: float,
               concurrency: int) -> tuple[Sample, Sample]:
    """Run ``load`` on the server ``pid`` (serving ``models``) for ``minutes``; the samples after the warm-up and
    at the end, both idle."""
    url, start = load.url, time.monotonic()
    total = minutes * 60
    warmup = min(120.0, 0.2 * total)
    print(HEADER, flush=True)

    def sample_now() -> Sample:
        return sample(pid, url, load, start, models)

    async def sampler(stop: asyncio.Event) -> None:
        while not stop.is_set():
            print(sample_now().row(), flush=True)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass

    async def idle() -> Sample:
        """The load is paused: wait until the server holds no block, then sample."""
        deadline = time.monotonic() + 30
        while sample_now().kv_blocks and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # closed connections' descriptors go
        now = sample_now()
        print(now.row(), flush=True)
        return now

    stop = asyncio.Event()
    watching = asyncio.create_task(sampler(stop))
    await load.run(concurrency, start + warmup)
    baseline = await idle()
    print(f"soak: warm-up done after {baseline.elapsed:.0f} s: {baseline}", file=sys.stderr)
    await load.run(concurrency, time.monotonic() + total - warmup)  # the warm-up's overrun not counted
    stop.set()
    await watching
    return baseline, await idle()


def verdict(baseline: Sample, final: Sample, load: Load) -> list[str]:
    """What failed (empty: the run passed)."""
    failed = []
    growth = final.rss_mib / baseline.rss_mib - 1
    if growth >= RSS_GROWTH:
        failed.append(f"RSS grew {growth:.1%} after warm-up ({baseline.rss_mib:.0f} -> {final.rss_mib:.0f} MiB)")
    for name in ("fds", "threads"):
        before, after = getattr(baseline, name), getattr(final, name)
        if abs(after - before) > FLAT:
            failed.append(f"{name}: {before} after warm-up, {after} at the end")
    if final.kv_blocks:
        failed.append(f"{final.kv_blocks:.0f} KV blocks in use at the end")
    if load.failures:
        failed.append(f"{load.failures} requests answered wrongly (see above)")
    return failed


def speech_wav() -> bytes:
    """Four seconds of the real call: a transcription of a few decode steps."""
    audio, rate, _ = speech_sample()
    buffer = io.BytesIO()
    soundfile.write(buffer, audio[:4 * rate], rate, format="WAV")
    return buffer.getvalue()


@contextmanager
def running_server(models: dict[str, str], directory: Path, max_num_seqs: int) -> Iterator[tuple[int, str, Path]]:
    """``tt-models serve`` of ``models`` (served name: model) in its own process, until the block ends: its pid,
    URL and log."""
    port, log = free_port(), directory / "server.log"
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tt_models.server.cli", "serve", *models.values(), "--served-model-name",
               *models, "--backend", "host", "--optimizations", "accuracy", "--max-model-len", "448",
               "--max-num-seqs", str(max_num_seqs), "--port", str(port), "--log-level", "warning"]
    with open(log, "w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, server, log, seconds=600)
        yield server.pid, url, log
    finally:
        server.terminate()
        server.wait(60)


def report(baseline: Sample, final: Sample, load: Load, log: Path) -> list[str]:
    """Print the run's tally and verdict (stderr); what failed, a traceback in the server's ``log`` included."""
    outcomes = ", ".join(f"{kind} {result}: {n}" for (kind, result), n in sorted(load.outcomes.items()))
    print(f"soak: {load.done} requests ({outcomes})", file=sys.stderr)
    latency = ", ".join(f"{kind} {statistics.median(times):.1f}/{max(times):.1f}"
                        for kind, times in load.seconds.items() if times)
    print(f"soak: seconds per request, median/max: {latency}", file=sys.stderr)
    failed = verdict(baseline, final, load)
    print("soak: PASS" if not failed else "soak: FAIL: " + "; ".join(failed), file=sys.stderr)
    if "Traceback" in log.read_text():
        print(f"soak: the server logged a traceback:\n{log.read_text()[-4000:]}", file=sys.stderr)
        failed.append("traceback")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--concurrency", type=int, default=8, help="clients sending at once")
    parser.add_argument("--chat-model", default="smollm2-135m-instruct")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tt-models-soak-") as tmp:
        models = {BART: str(save_tiny_bart(Path(tmp))), CHAT: args.chat_model, WHISPER: "whisper-tiny.en"}
        with running_server(models, Path(tmp), max_num_seqs=16) as (pid, url, log):
            load = Load(url, speech_wav())
            baseline, final = asyncio.run(soak(load, pid, tuple(models), minutes=args.minutes,
                                               interval=args.interval, concurrency=args.concurrency))
        failed = report(baseline, final, load, log)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
