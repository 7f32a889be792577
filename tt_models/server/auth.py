"""API keys, as vLLM's ``--api-key``: every ``/v1`` route (the ``/v1/realtime`` WebSocket's handshake too) needs
``Authorization: Bearer KEY``, answered with OpenAI's 401 otherwise. ``/health``, ``/metrics`` and ``/disagg/info``
stay open: orchestrators, Prometheus and the proxy's discovery read them, and they carry no prompts."""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from tt_models.server.errors import APIError, Refusal, client_address

logger = logging.getLogger(__name__)

API_KEY_ENV = "TT_MODELS_API_KEY"


def api_keys(given: Sequence[str] | None) -> list[str]:
    """The keys of ``--api-key`` (repeatable), else ``$TT_MODELS_API_KEY``; none leaves the server open."""
    keys = list(given or []) or ([os.environ[API_KEY_ENV]] if os.environ.get(API_KEY_ENV) else [])
    if any(not key.strip() for key in keys):
        raise ValueError("an API key must not be empty")
    return keys


class BearerAuth:
    """ASGI middleware (a plain one: streamed responses pass through untouched) that refuses ``/v1`` requests
    without one of ``keys``."""

    def __init__(self, app: ASGIApp, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("BearerAuth needs at least one API key")
        self.app = app
        self._keys = [key.encode() for key in keys]
        error = APIError(401, "Invalid or missing API key: send the header 'Authorization: Bearer <key>'",
                         code="invalid_api_key")
        self._refusal = Refusal(error, [(b"www-authenticate", b"Bearer")])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith("/v1") and not self._authorized(scope):
            logger.warning("refused %s %s from %s: no valid API key", scope.get("method", "WebSocket"),
                           scope["path"], client_address(scope))
            await self._refusal.send(send if scope["type"] == "http" else _denial(send))
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        header = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        scheme, _, token = header.partition(b" ")
        # Every key compared, each in constant time: how long a refusal takes says nothing of the keys.
        return scheme.lower() == b"bearer" and any([hmac.compare_digest(token.strip(), key) for key in self._keys])


def _denial(send: Send) -> Send:
    """A WebSocket handshake refused with the same HTTP response (ASGI's ``websocket.http.response``, which uvicorn
    implements): the 401 and OpenAI's body, as the other routes answer."""

    async def deny(message: dict) -> None:
        await send({**message, "type": f"websocket.{message['type']}"})

    return deny
