"""``/metrics`` carries vLLM's series for what vLLM also measures, under vLLM's names, labels and buckets (compared with
the installed vLLM's own definitions), with values that move with the requests sent."""

from __future__ import annotations

import ast
import importlib.util
import time
from pathlib import Path

import pytest

from tests.server.cases import LLAMA
from tt_models.server.metrics import (REQUEST_LATENCY_BUCKETS, TOKEN_LATENCY_BUCKETS, TTFT_BUCKETS,
                                      token_count_buckets)
from tt_models.testing.metrics import metric

pytestmark = pytest.mark.slow
PROMPT = "The capital of France is"
TOKENS = 12


def vllm_histogram_buckets() -> dict[str, list[float]]:
    """The buckets of each histogram vLLM's Prometheus logger defines, read from its source (building the logger needs
    a whole vLLM config): ``name="vllm:..."`` calls with a literal ``buckets=[...]``, or one named by a variable."""
    source = Path(importlib.util.find_spec("vllm.v1.metrics.loggers").origin).read_text()
    tree = ast.parse(source)
    lists = {node.targets[0].id: ast.literal_eval(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
             and isinstance(node.value, ast.List) and all(isinstance(e, ast.Constant) for e in node.value.elts)}
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        name, buckets = keywords.get("name"), keywords.get("buckets")
        if isinstance(name, ast.Constant) and isinstance(buckets, ast.List):
            found[name.value] = ast.literal_eval(buckets)
        elif isinstance(name, ast.Constant) and isinstance(buckets, ast.Name) and buckets.id in lists:
            found[name.value] = lists[buckets.id]
    return found


def test_histogram_buckets_are_vllms():
    theirs = vllm_histogram_buckets()
    assert theirs["vllm:time_to_first_token_seconds"] == list(TTFT_BUCKETS)
    assert theirs["vllm:inter_token_latency_seconds"] == list(TOKEN_LATENCY_BUCKETS)
    assert theirs["vllm:request_time_per_output_token_seconds"] == list(TOKEN_LATENCY_BUCKETS)
    for name in ("e2e_request_latency", "request_queue_time", "request_prefill_time", "request_decode_time",
                 "request_inference_time"):
        assert theirs[f"vllm:{name}_seconds"] == list(REQUEST_LATENCY_BUCKETS), name
    assert token_count_buckets(100) == [1, 2, 5, 10, 20, 50, 100]  # vLLM's build_1_2_5_buckets docstring


def test_vllm_series_move_with_the_requests(client, http):
    def value(name: str, text: str | None = None, **labels: str) -> float:
        """A counter's sample (0 before its first increment)."""
        return metric(text if text is not None else http.get("/metrics").text, name, 0.0, model_name=LLAMA,
                      **labels)

    before = http.get("/metrics").text
    stream = client.completions.create(model=LLAMA, prompt=PROMPT, max_tokens=TOKENS, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = iter(stream)
    next(chunks)  # it has a token: it runs and holds blocks
    during = http.get("/metrics").text
    gauge = {name: metric(during, name, model_name=LLAMA, engine="0")  # (a missing sample fails)
             for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")}
    assert gauge["vllm:num_requests_running"] == 1 and gauge["vllm:num_requests_waiting"] == 0
    assert 0 < gauge["vllm:kv_cache_usage_perc"] <= 1
    usage = [c.usage for c in chunks if c.usage is not None][-1]

    deadline = time.monotonic() + 30  # the request ends on the engine's thread: its counters follow its last chunk
    while value("vllm:request_success_total", finished_reason="length") == value(
            "vllm:request_success_total", before, finished_reason="length"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    after = http.get("/metrics").text

    def moved(name: str, **labels: str) -> float:
        return value(name, after, **labels) - value(name, before, **labels)

    assert moved("vllm:request_success_total", finished_reason="length") == 1
    assert moved("vllm:prompt_tokens_total") == usage.prompt_tokens
    assert moved("vllm:generation_tokens_total") == usage.completion_tokens == TOKENS
    assert moved("vllm:inter_token_latency_seconds_count") == TOKENS - 1  # one per token after the first
    assert moved("vllm:inter_token_latency_seconds_sum") > 0
    for histogram in ("time_to_first_token", "e2e_request_latency", "request_queue_time", "request_prefill_time",
                      "request_decode_time", "request_inference_time", "request_time_per_output_token"):
        assert moved(f"vllm:{histogram}_seconds_count") == 1, histogram
    assert moved("vllm:request_generation_tokens_sum") == TOKENS
    assert metric(after, "vllm:num_requests_running", model_name=LLAMA) == 0
    assert metric(after, "vllm:kv_cache_usage_perc", model_name=LLAMA) == 0


def test_prefix_cache_counters_count_a_repeated_prompt(client, http):
    """vLLM's prefix-cache counters, in prompt tokens: the second of two equal prompts finds its full blocks but the
    one holding its last token cached (the server's blocks are 64 tokens)."""
    prompt = "Paris is the capital of France. " * 30
    before = http.get("/metrics").text
    usages = [client.completions.create(model=LLAMA, prompt=prompt, max_tokens=2, temperature=0).usage
              for _ in range(2)]
    after = http.get("/metrics").text

    def moved(name: str) -> float:
        return metric(after, name, model_name=LLAMA, engine="0") - metric(before, name, model_name=LLAMA, engine="0")

    prompt_tokens = usages[0].prompt_tokens
    assert prompt_tokens > 128
    assert moved("vllm:prefix_cache_queries_total") == 2 * prompt_tokens
    assert moved("vllm:prefix_cache_hits_total") == (prompt_tokens - 1) // 64 * 64
