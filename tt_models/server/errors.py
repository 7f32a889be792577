"""Errors in OpenAI's body, ``{"error": {"message", "type", "param", "code"}}``, for every failure the server reports.

FastAPI answers a body it cannot parse or validate with 422 and its own shape; OpenAI clients expect 400
with OpenAI's, so its handlers are replaced.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import Scope, Send

from tt_models.disagg.routing import TransferError
from tt_models.disagg.request_context import request_id

logger = logging.getLogger(__name__)

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          413: "invalid_request_error"}


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error body."""

    error: ErrorInfo


class EngineFailed(RuntimeError):
    """A model step raised: the requests it ran are ended with this error, and the loop goes on."""


class ShuttingDown(EngineFailed):
    """The server stopped before the request finished."""


class APIError(Exception):
    """A failure to report to the client with ``status_code``."""

    def __init__(self, status_code: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.info = ErrorInfo(message=message, type=_TYPES.get(status_code, "server_error"), param=param, code=code)

    def body(self) -> ErrorResponse:
        return ErrorResponse(error=self.info)


class Refusal:
    """An ASGI middleware's answer to a request it refuses before any route runs: ``error``'s status and OpenAI body
    (encoded once), with ``headers`` beside the content type."""

    def __init__(self, error: APIError, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self._start = {"type": "http.response.start", "status": error.status_code,
                       "headers": [(b"content-type", b"application/json"), *headers]}
        self._body = {"type": "http.response.body", "body": json.dumps(error.body().model_dump()).encode()}

    async def send(self, send: Send) -> None:
        await send(self._start)
        await send(self._body)


def client_address(scope: Scope) -> str:
    """The ASGI client as ``host:port``: how a middleware's log names a request, before it has an id."""
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


def as_api_error(error: Exception) -> APIError:
    """What the client is told of a failure: a lost encoder output is the upstream's (502), a failed engine step
    or a server that stops the server's (503), anything else an internal error (500)."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, TransferError):
        return APIError(502, str(error), code="encoder_transfer_failed")
    if isinstance(error, ShuttingDown):
        return APIError(503, str(error), code="server_shutting_down")
    if isinstance(error, EngineFailed):
        return APIError(503, str(error), code="engine_failed")
    return APIError(500, f"Internal server error: {type(error).__name__}: {error}")


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body().model_dump(), status_code=error.status_code)


@contextmanager
def engine_errors() -> Iterator[None]:
    """The engine's refusals as client errors: ValueError names a bad request, OverflowError a full queue."""
    try:
        yield
    except ValueError as error:
        raise APIError(400, str(error)) from error
    except OverflowError as error:
        raise APIError(503, f"The server is overloaded, try again later: {error}", code="queue_full") from error


def _validation_message(error: RequestValidationError) -> tuple[str, str | None]:
    parts, param = [], None
    for item in error.errors():
        location = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        if item.get("type") == "json_invalid":
            reason = item.get("ctx", {}).get("error", "")
            parts.append(f"The body is not valid JSON: {reason} (at character {location or 0})")
            continue
        param = param or location or None
        parts.append(f"{location}: {item.get('msg')}" if location else str(item.get("msg")))
    return "; ".join(parts) or "Invalid request", param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(error)
        return error_response(APIError(400, message, param=param))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return error_response(APIError(error.status_code, str(error.detail)))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        if not isinstance(error, (TransferError, EngineFailed)):
            logger.exception("request %s: unhandled error in %s %s", request_id.get(), request.method,
                             request.url.path)
        return error_response(as_api_error(error))
