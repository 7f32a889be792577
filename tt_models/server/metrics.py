"""Prometheus metrics of a server, per model (labels ``model_name`` and ``engine``, as vLLM's).

What vLLM's server also measures carries vLLM's name, labels and buckets (vLLM 0.25.1 ``vllm/v1/metrics/loggers.py``),
so dashboards made for TT vLLM read tt-models unchanged; what vLLM has no metric for is named ``tt_models:``. Request
states and KV blocks are read from the engines when scraped; inter-token latencies after every step; the rest as each
request ends. Each server has its own registry, so several can live in one process.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput

_LABELS = ["model_name", "engine"]
ENGINE_INDEX = "0"  # vLLM's label for the engine core of a model (one per data-parallel rank); tt-models has one
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                         40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)


def kv_blocks_in_use(engine: LLMEngine) -> int:
    """Blocks held by requests, over every replica's pool."""
    scheduler = engine.scheduler
    return sum(kv.num_blocks for kv in scheduler.kvs) - scheduler.num_free_blocks


def token_count_buckets(max_model_len: int) -> list[int]:
    """vLLM's 1-2-5 buckets up to ``max_model_len`` (its ``build_1_2_5_buckets``): 1, 2, 5, 10, 20, 50, ..."""
    buckets, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10 ** exponent
            if value > max_model_len:
                return buckets
            buckets.append(value)
        exponent += 1


class _EngineState(Collector):
    """Requests by scheduler state, KV blocks and preemptions, read at scrape time (lengths and counters: reading them
    from the scraping thread while the loop thread steps is safe)."""

    def __init__(self, engines: Mapping[str, LLMEngine]) -> None:
        self.engines = engines

    def collect(self) -> Iterator[Metric]:
        running = GaugeMetricFamily("vllm:num_requests_running", "Number of requests in model execution batches.",
                                    labels=_LABELS)
        waiting = GaugeMetricFamily("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                                    labels=_LABELS)
        usage = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                                  labels=_LABELS)
        preemptions = CounterMetricFamily("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                          labels=_LABELS)
        queries = CounterMetricFamily("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
                                      "queried tokens.", labels=_LABELS)
        hits = CounterMetricFamily("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                                   labels=_LABELS)
        swapped = GaugeMetricFamily("tt_models:num_requests_swapped", "Requests whose KV blocks are swapped out to "
                                    "host memory.", labels=["model_name"])
        in_use = GaugeMetricFamily("tt_models:kv_blocks_in_use", "Device KV blocks held by requests.",
                                   labels=["model_name"])
        total = GaugeMetricFamily("tt_models:kv_blocks_total", "Device KV blocks in the pool.", labels=["model_name"])
        for name, engine in self.engines.items():
            scheduler = getattr(engine, "scheduler", None)
            if scheduler is None:  # an encode instance's engine: no KV cache (tt_models.disagg.metrics has its queues)
                continue
            labels = [name, ENGINE_INDEX]
            blocks = sum(kv.num_blocks for kv in scheduler.kvs)  # every replica's (less a window's null block)
            running.add_metric(labels, len(scheduler.running))
            waiting.add_metric(labels, len(scheduler.waiting))
            usage.add_metric(labels, kv_blocks_in_use(engine) / blocks)
            preemptions.add_metric(labels, scheduler.num_preemptions)
            queries.add_metric(labels, scheduler.prefix_cache_queries)
            hits.add_metric(labels, scheduler.prefix_cache_hits)
            swapped.add_metric([name], len(scheduler.swapped))
            in_use.add_metric([name], kv_blocks_in_use(engine))
            total.add_metric([name], blocks)
        yield from (running, waiting, usage, preemptions, queries, hits, swapped, in_use, total)


class ServerMetrics:
    def __init__(self, engines: Mapping[str, LLMEngine]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_EngineState(engines))
        kwargs = dict(labelnames=_LABELS, registry=self.registry)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", **kwargs)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", **kwargs)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               labelnames=[*_LABELS, "finished_reason"], registry=self.registry)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              buckets=TTFT_BUCKETS, **kwargs)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             buckets=TOKEN_LATENCY_BUCKETS, **kwargs)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", buckets=TOKEN_LATENCY_BUCKETS,
                              **kwargs)
        latencies = {"e2e_request_latency": "e2e request latency", "request_queue_time": "time spent in WAITING phase",
                     "request_prefill_time": "time spent in PREFILL phase",
                     "request_decode_time": "time spent in DECODE phase",
                     "request_inference_time": "time spent in RUNNING phase"}
        self.latency = {key: Histogram(f"vllm:{key}_seconds", f"Histogram of {text} in seconds.",
                                       buckets=REQUEST_LATENCY_BUCKETS, **kwargs) for key, text in latencies.items()}
        self.request_tokens = {
            kind: Histogram(f"vllm:request_{kind}_tokens", f"Number of {kind} tokens processed.",
                            buckets=token_count_buckets(max(e.config.max_model_len for e in engines.values())),
                            **kwargs)
            for kind in ("prompt", "generation")}

    def observe_step(self, model_name: str, engine: LLMEngine) -> None:
        """Record the inter-token latencies of the engine's last step (on the loop thread, after each step)."""
        if engine.inter_token_latencies is None:
            engine.inter_token_latencies = []  # the engine records them from now on
        latencies = engine.inter_token_latencies
        if latencies:
            histogram = self.itl.labels(model_name, ENGINE_INDEX)
            for latency in latencies:
                histogram.observe(latency)
            latencies.clear()

    def observe(self, model_name: str, output: RequestOutput) -> None:
        """Record an ended request (finished or aborted)."""
        labels = (model_name, ENGINE_INDEX)
        prompt = len(output.prompt_token_ids) + len(output.encoder_prompt_token_ids or ())
        generated = [len(seq.token_ids) for seq in output.outputs]
        self.prompt_tokens.labels(*labels).inc(prompt)
        self.generation_tokens.labels(*labels).inc(sum(generated))
        reason = (output.outputs[0].finish_reason if output.outputs else None) or "abort"
        self.success.labels(*labels, reason).inc()
        m = output.metrics
        if m.first_token_time is None:
            return
        self.ttft.labels(*labels).observe(m.first_token_time - m.arrival_time)
        if reason == "abort" or m.finished_time is None:  # an aborted request's times say nothing
            return
        self.request_tokens["prompt"].labels(*labels).observe(prompt)
        self.request_tokens["generation"].labels(*labels).observe(sum(generated))
        scheduled = m.first_scheduled_time if m.first_scheduled_time is not None else m.arrival_time
        for key, seconds in (("e2e_request_latency", m.finished_time - m.arrival_time),
                             ("request_queue_time", scheduled - m.arrival_time),
                             ("request_prefill_time", m.first_token_time - scheduled),
                             ("request_decode_time", m.finished_time - m.first_token_time),
                             ("request_inference_time", m.finished_time - scheduled)):
            self.latency[key].labels(*labels).observe(seconds)
        if max(generated) > 1:
            self.tpot.labels(*labels).observe((m.finished_time - m.first_token_time) / (max(generated) - 1))

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
