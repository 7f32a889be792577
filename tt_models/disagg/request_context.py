"""What an HTTP front of tt-models (``serve``, and the proxy, hence its place here below the server) knows of the
request being served, for code below the routes: context variables set by an ASGI middleware for the request's task (and reset after it: keep-alive connections reuse the task), and the
access log line of each request, which carries its id (uvicorn's carries none)."""

from __future__ import annotations

import logging
import time
import uuid
from contextvars import ContextVar
from typing import Any

from tt_models.disagg.routing import PREFILL_DECODE_HEADER, REQUEST_ID_HEADER, prefill_decode_target

logger = logging.getLogger("tt_models.server.access")

# The request's id: the client's X-Request-Id (as vLLM's server honours it), else a new one. The base of the
# request's response and engine request ids (``chatcmpl-<id>``), and what every log line about it names.
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


class RequestContext:
    """ASGI middleware: the request's id into :data:`request_id` (the client's ``X-Request-Id`` unless
    ``trust_client_id`` is False: the proxy's ids must be unique, they key encoder outputs on the broker),
    ``X-TT-Prefill-Decode`` into the encode engine's target; one access log line per request."""

    def __init__(self, app: Any, trust_client_id: bool = True) -> None:
        self.app = app
        self.trust_client_id = trust_client_id

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        given = headers.get(REQUEST_ID_HEADER) if self.trust_client_id else None
        tokens = [(request_id, request_id.set(given or uuid.uuid4().hex)),
                  (prefill_decode_target, prefill_decode_target.set(headers.get(PREFILL_DECODE_HEADER) or None))]
        status, start = 0, time.monotonic()

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            logger.info("request %s: %s %s %s from %s (%.3f s)", request_id.get(), scope["method"], scope["path"],
                        status or "unanswered", f"{client[0]}:{client[1]}" if client else "?",
                        time.monotonic() - start)
            for var, token in tokens:
                var.reset(token)
