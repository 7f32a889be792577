"""The encoder-cache connector: a thread that receives an instance's broker messages and hands them over.

The engine is not thread-safe, so the connector never touches it: it parses each message, queues it, and calls
``wake`` (the engine loop's, which then runs the engine's ``service`` on the loop thread). It also wakes the loop
every ``tick`` seconds, so timeouts fire when no message comes (a wake costs the loop microseconds). A broker outage
(Redis restarted) is logged once; the thread retries until the broker is back.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from tt_models.disagg.broker import Broker, PayloadError, parse_message

logger = logging.getLogger(__name__)


class Connector:
    def __init__(self, broker: Broker, channels: tuple[str, ...], *, tick: float = 0.5) -> None:
        self.broker = broker
        self.channels = channels
        self.tick = tick
        self.received: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()  # (channel, message or PayloadError)
        self.wake: Callable[[], None] = lambda: None
        self.outages = 0  # broker outages seen: messages in flight during one may be lost
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tt-models-connector-{broker.instance}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def messages(self) -> list[tuple[str, Any]]:
        """Everything received so far (called on the engine thread)."""
        out = []
        while True:
            try:
                out.append(self.received.get_nowait())
            except queue.Empty:
                return out

    def _run(self) -> None:
        down_since = None
        while not self._stopped.is_set():
            try:
                item = self.broker.receive(self.channels, timeout=self.tick)
            except (redis.ConnectionError, redis.TimeoutError) as error:
                if down_since is None:
                    down_since = time.monotonic()
                    self.outages += 1
                    logger.warning("broker %s unreachable (%s); retrying", self.broker.url, error)
                self.wake()  # the engine's timeouts still run
                self._stopped.wait(self.tick)
                continue
            if down_since is not None:
                logger.warning("broker %s is back after %.1f s", self.broker.url, time.monotonic() - down_since)
                down_since = None
            if item is not None:
                channel, payload = item
                try:
                    message: Any = parse_message(channel, payload)
                except PayloadError as error:
                    message = error
                self.received.put((channel, message))
            self.wake()
