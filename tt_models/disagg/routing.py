"""How a request finds its instances: the headers the proxy sets, and the context that carries them to the engine.

The proxy gives each request one id (``X-Request-Id``) on every instance, so the engine requests a route builds
from it have the same ids on the encode and the prefill-decode instance: that id is the key under which the
encoder output travels. It names the prefill-decode instance in ``X-TT-Prefill-Decode`` for the encode
instance. The server puts both in context variables for the request's task; the engine loop runs ``add_request``
in the submitting task's context, so the encode engine reads its target there.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Literal

Role = Literal["encode", "prefill_decode", "both"]

REQUEST_ID_HEADER = "x-request-id"
PREFILL_DECODE_HEADER = "x-tt-prefill-decode"

prefill_decode_target: ContextVar[str | None] = ContextVar("prefill_decode_target", default=None)


class TransferError(RuntimeError):
    """An encoder output did not make it from the encode instance to the prefill-decode instance."""
