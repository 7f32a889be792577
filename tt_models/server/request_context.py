"""What the server knows of the HTTP request being served, for code below the routes: context variables set by
an ASGI middleware for the request's task (and reset after it: keep-alive connections reuse the task)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from tt_models.disagg.routing import PREFILL_DECODE_HEADER, REQUEST_ID_HEADER, prefill_decode_target

# The client's X-Request-Id (as vLLM's server honours it): the base of the request's engine request ids.
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


class RequestContext:
    """ASGI middleware: ``X-Request-Id`` into :data:`request_id`, ``X-TT-Prefill-Decode`` into the encode
    engine's target."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        tokens = [(var, var.set(headers.get(header) or None)) for var, header in
                  ((request_id, REQUEST_ID_HEADER), (prefill_decode_target, PREFILL_DECODE_HEADER))]
        try:
            await self.app(scope, receive, send)
        finally:
            for var, token in tokens:
                var.reset(token)
