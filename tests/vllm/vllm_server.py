"""vLLM's own OpenAI server as these tests run and read it: the ``vllm`` script beside this interpreter (``vllm
serve``), the ``openai`` client of it, its Prometheus gauges."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import openai

VLLM = str(Path(sys.executable).with_name("vllm"))


def client(url: str) -> openai.OpenAI:
    """The client as users run it, with its default retries: a request on a kept-alive connection the server has
    just closed (uvicorn closes idle ones after 5 s) is reset, seen here once in a few runs; 4xx answers are not
    retried."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=600)


def metrics(url: str) -> dict[str, float]:
    """vLLM's Prometheus gauges of the engine, by name: ``vllm:kv_cache_usage_perc`` (the share of the KV block pool
    in use: 0 once every request's self and cross blocks are back), ``vllm:num_requests_running``/``_waiting``."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("vllm:") and "{" in line and ("_perc" in line or "num_requests_" in line)}
