"""tt-models' OpenAI-compatible HTTP server: ``tt-models serve MODEL`` or ``create_app({name: LLMEngine})``."""

from tt_models.server.app import create_app
from tt_models.server.async_engine import AsyncEngine, RequestStream

__all__ = ["AsyncEngine", "RequestStream", "create_app"]
