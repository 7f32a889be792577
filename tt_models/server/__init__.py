"""tt-models' OpenAI-compatible HTTP server: ``tt-models serve MODEL`` or ``create_app({name: LLMEngine})``.

Its names load on first use: ``tt-models proxy`` runs from this package without the engine (and torch)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["AsyncEngine", "RequestStream", "create_app"]
_HOMES = {"create_app": "tt_models.server.app", "AsyncEngine": "tt_models.server.async_engine",
          "RequestStream": "tt_models.server.async_engine"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
