"""Prometheus metrics of a server, per model (label ``model_name``); names follow vLLM's with a ``tt_models:`` prefix.

Request states and KV blocks are read from the engines when scraped; token counts and latencies are recorded
as each request ends. Each server has its own registry, so several can live in one process.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput

_LABELS = ["model_name"]
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0)


def kv_blocks_in_use(engine: LLMEngine) -> int:
    """Blocks held by requests, over every replica's pool."""
    scheduler = engine.scheduler
    return engine.config.num_kv_blocks * len(scheduler.kvs) - scheduler.num_free_blocks


class _EngineState(Collector):
    """Requests by scheduler state and KV blocks, read at scrape time (lengths and counters: reading them from
    the scraping thread while the loop thread steps is safe)."""

    def __init__(self, engines: Mapping[str, LLMEngine]) -> None:
        self.engines = engines

    def collect(self) -> Iterator[Metric]:
        states = {state: GaugeMetricFamily(f"tt_models:num_requests_{state}", f"Requests {state}.", labels=_LABELS)
                  for state in ("waiting", "running", "swapped")}
        in_use = GaugeMetricFamily("tt_models:kv_blocks_in_use", "Device KV blocks held by requests.",
                                   labels=_LABELS)
        total = GaugeMetricFamily("tt_models:kv_blocks_total", "Device KV blocks in the pool.", labels=_LABELS)
        for name, engine in self.engines.items():
            scheduler = getattr(engine, "scheduler", None)
            if scheduler is None:  # an encode instance's engine: no KV cache (tt_models.disagg.metrics has its queues)
                continue
            for state, family in states.items():
                family.add_metric([name], len(getattr(scheduler, state)))
            in_use.add_metric([name], kv_blocks_in_use(engine))
            total.add_metric([name], engine.config.num_kv_blocks * len(scheduler.kvs))  # every replica's
        yield from states.values()
        yield in_use
        yield total


class ServerMetrics:
    def __init__(self, engines: Mapping[str, LLMEngine]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_EngineState(engines))
        kwargs = dict(labelnames=_LABELS, registry=self.registry)
        self.prompt_tokens = Counter("tt_models:prompt_tokens", "Prompt tokens of ended requests.", **kwargs)
        self.generation_tokens = Counter("tt_models:generation_tokens", "Generated tokens.", **kwargs)
        self.finished = Counter("tt_models:request_finished", "Ended requests by finish reason.",
                                labelnames=[*_LABELS, "finish_reason"], registry=self.registry)
        self.ttft = Histogram("tt_models:time_to_first_token_seconds", "Time to first token.",
                              buckets=_LATENCY_BUCKETS, **kwargs)
        self.tpot = Histogram("tt_models:time_per_output_token_seconds",
                              "Mean time per output token after the first, per request.", buckets=_TOKEN_BUCKETS,
                              **kwargs)
        self.e2e = Histogram("tt_models:e2e_request_latency_seconds", "Arrival to finish.",
                             buckets=_LATENCY_BUCKETS, **kwargs)

    def observe(self, model_name: str, output: RequestOutput) -> None:
        """Record an ended request (finished or aborted)."""
        prompt = len(output.prompt_token_ids) + len(output.encoder_prompt_token_ids or ())
        generated = [len(seq.token_ids) for seq in output.outputs]
        self.prompt_tokens.labels(model_name).inc(prompt)
        self.generation_tokens.labels(model_name).inc(sum(generated))
        reason = (output.outputs[0].finish_reason if output.outputs else None) or "abort"
        self.finished.labels(model_name, reason).inc()
        m = output.metrics
        if m.first_token_time is None:
            return
        self.ttft.labels(model_name).observe(m.first_token_time - m.arrival_time)
        if reason != "abort" and m.finished_time is not None:  # an aborted request's times say nothing
            self.e2e.labels(model_name).observe(m.finished_time - m.arrival_time)
            if max(generated) > 1:
                self.tpot.labels(model_name).observe((m.finished_time - m.first_token_time) / (max(generated) - 1))

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
