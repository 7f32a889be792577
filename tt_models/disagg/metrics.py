"""Prometheus metrics of a disaggregated instance: its queues and the broker's transfers (read when scraped)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tt_models.disagg.encode_engine import EncodeEngine, Stage


def _queues(engine: Any) -> dict[str, int]:
    if isinstance(engine, EncodeEngine):
        return {"encode_waiting": len(engine.waiting),
                **{stage.value: engine.num_in_stage(stage) for stage in (Stage.AWAITING_ALLOCATION,
                                                                          Stage.AWAITING_INJECTION)}}
    inbox = engine.encoder_inbox
    return {"metadata_pending": len(inbox.pending), "awaiting_states": inbox.num_awaiting_states,
            "unclaimed": inbox.num_unclaimed}


class DisaggState(Collector):
    """Per model: queue lengths by queue, broker messages and bytes by channel and direction, and (prefill-decode)
    encoder outputs by outcome."""

    def __init__(self, engines: Mapping[str, Any]) -> None:
        self.engines = engines

    def collect(self) -> Iterator[Metric]:
        queues = GaugeMetricFamily("tt_models:disagg_queue_length", "Requests in each queue of encoder "
                                   "disaggregation.", labels=["model_name", "queue"])
        messages = CounterMetricFamily("tt_models:broker_messages", "Broker messages.",
                                       labels=["model_name", "channel", "direction"])
        nbytes = CounterMetricFamily("tt_models:broker_bytes", "Broker payload bytes.",
                                     labels=["model_name", "channel", "direction"])
        outcomes = CounterMetricFamily("tt_models:encoder_outputs",
                                       "Encoder outputs received, by outcome (waited: found the pool full first).",
                                       labels=["model_name", "outcome"])
        for name, engine in self.engines.items():
            if not isinstance(engine, EncodeEngine) and engine.encoder_inbox is None:
                continue  # a decoder-only model of a prefill-decode instance: its queues are the engine's
            for queue, length in _queues(engine).items():
                queues.add_metric([name, queue], length)
            broker = engine.broker if isinstance(engine, EncodeEngine) else engine.encoder_inbox.broker
            for (channel, direction), count in list(broker.transfers.items()):
                messages.add_metric([name, channel, direction], count)
                nbytes.add_metric([name, channel, direction], broker.transfer_bytes[channel, direction])
            if not isinstance(engine, EncodeEngine):
                stats = engine.encoder_inbox.stats
                for outcome in ("injected", "claimed", "refused", "expired", "withdrawn", "waited"):
                    outcomes.add_metric([name, outcome], getattr(stats, outcome))
        yield from (queues, messages, nbytes, outcomes)
