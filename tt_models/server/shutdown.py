"""A graceful stop of ``tt-models serve`` and ``tt-models proxy``: on SIGTERM or SIGINT the server stops taking
requests (``/health`` and new requests answer 503, so an orchestrator's readiness check takes it out of rotation,
while it still listens), lets the running ones finish for up to ``--shutdown-timeout`` seconds, then ends the rest
with an error their clients see (a stream's last event, or a 503), and stops: serve's lifespan then stops the engine
loops, frees their blocks and closes the devices. A second signal stops it at once. It exits with status 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from tt_models.server.errors import APIError, Refusal, ShuttingDown, client_address

if TYPE_CHECKING:  # the proxy runs this module without the engine
    from tt_models.server.async_engine import AsyncEngine

logger = logging.getLogger(__name__)

ABORT_GRACE_S = 5.0  # after the abort, for handlers to send their error to their clients


class Drain:
    """ASGI middleware that counts the HTTP requests in flight and, once ``draining``, answers new ones 503
    (``/metrics`` stays open: a scrape during the drain shows it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.draining = False
        self.in_flight = 0
        self._refusal = Refusal(APIError(503, "The server is shutting down: send the request to another instance",
                                         code="server_shutting_down"), [(b"connection", b"close")])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            await self.app(scope, receive, send)
            return
        if self.draining and scope["path"] != "/metrics":
            logger.info("refused %s %s from %s: the server is shutting down", scope["method"], scope["path"],
                        client_address(scope))
            await self._refusal.send(send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class GracefulServer(uvicorn.Server):
    """uvicorn's server with the drain above: the signal starts it, and uvicorn's tick (every 0.1 s, on the event
    loop) watches it, so no state is shared with the signal handler but two flags."""

    def __init__(self, config: uvicorn.Config, drain: Drain, abort: Callable[[str], None], timeout: float) -> None:
        super().__init__(config)
        self.drain, self.abort, self.timeout = drain, abort, timeout
        self._deadline: float | None = None  # the drain's end, once a signal came
        self._aborted = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: that one stops listening at once, and re-raises the signal after the shutdown (the exit
        # status would be the signal's).
        if self._deadline is not None:
            logger.warning("second signal: stopping now")
            self.should_exit = self.force_exit = True
            return
        self.drain.draining = True
        self._deadline = time.monotonic() + self.timeout
        logger.info("stopping: no new requests; %d running may finish within %g s", self.drain.in_flight,
                    self.timeout)

    async def on_tick(self, counter: int) -> bool:
        stop = await super().on_tick(counter)
        if self._deadline is None or stop:
            return stop
        if self.drain.in_flight == 0:
            return True
        now = time.monotonic()
        if not self._aborted and now >= self._deadline:
            logger.warning("%d requests did not finish within %g s: ending them", self.drain.in_flight,
                           self.timeout)
            self.abort(f"The server is shutting down: the request did not finish within {self.timeout:g} s")
            self._aborted = True
        return now >= self._deadline + ABORT_GRACE_S


def fail_engines(engines: Iterable[AsyncEngine]) -> Callable[[str], None]:
    """The abort of ``tt-models serve``: every request of ``engines`` ends with the message, its blocks freed."""
    def abort(message: str) -> None:
        for engine in engines:
            engine.fail_all(ShuttingDown(message))
    return abort


def serve(app: ASGIApp, abort: Callable[[str], None], *, host: str, port: int, log_level: str,
          shutdown_timeout: float, ssl_keyfile: str | None = None, ssl_certfile: str | None = None) -> None:
    """Run ``app`` until a signal, then stop gracefully: ``abort(message)`` (called on the event loop) ends the
    requests still running after ``shutdown_timeout`` seconds. ``ssl_keyfile`` and ``ssl_certfile``: serve HTTPS."""
    drain = Drain(app)
    # uvicorn's own wait for open connections: nothing is left to wait for after the drain but idle ones. Its access
    # log is off: the app's own (tt_models.disagg.request_context) names each request's id.
    config = uvicorn.Config(drain, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5,
                            ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile, access_log=False)
    GracefulServer(config, drain, abort, shutdown_timeout).run()
