"""``tt-models proxy``: the OpenAI-compatible front of a disaggregated deployment.

It serves the routes of ``tt-models serve`` (streaming included) and sends each request on: a request for a model
that takes encoder inputs (Whisper, BART, Llama 3.2 Vision) first to an encode instance, naming the
prefill-decode instance it chose, then, once the encode instance has handed the encoder output over, to that
prefill-decode instance, whose response (a stream or not) goes back to the client as it comes. Decoder-only
requests go straight to a prefill-decode instance. Instances are picked by least outstanding requests.

Failures: the encode instance's refusal of a bad request is the client's answer (its 4xx); an encode instance
that fails or dies under a request gives that request 502 at once (a dead process resets its connections), one
that hangs gives 504 after ``encode_timeout`` seconds. An instance that refuses connections is skipped for a while
and the request goes to another; one that hung is skipped as long (its request already had its 504). At a graceful
stop (``tt_models.server.shutdown``), :meth:`Proxy.abort` ends the requests still running after the drain's
timeout: 503, or a stream's last event.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import httpx
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from tt_models.disagg.routing import PREFILL_DECODE_HEADER, REQUEST_ID_HEADER
from tt_models.disagg.request_context import RequestContext, request_id

logger = logging.getLogger(__name__)

_ENCODER_ROUTES = ("/v1/audio/transcriptions", "/v1/audio/translations")
_JSON_ROUTES = ("/v1/completions", "/v1/chat/completions")
_DOWN_SECONDS = 10

T = TypeVar("T")


@dataclass
class Instance:
    url: str
    role: str
    name: str = ""
    models: dict[str, dict] = field(default_factory=dict)
    outstanding: int = 0
    down_until: float = 0.0  # refused a connection: skipped until then


def _error_body(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse(_error_body(message, code), status_code=status)


class Aborted(Exception):
    """The proxy is stopping and the drain's timeout passed: the request ends now (its message says so)."""


def _stream_error(body: bytes) -> str | None:
    """The message of an error event in a server-sent event stream, if it has one."""
    for line in body.splitlines():
        if line.startswith(b"data: {"):
            event = json.loads(line[6:])
            if "error" in event:
                return event["error"].get("message", "error")
    return None


class Proxy:
    """``upstream_api_key``: the key the instances require (``tt-models serve --api-key``), sent on every request
    to them; the clients' own ``Authorization`` is never forwarded."""

    def __init__(self, encode: Sequence[str], prefill_decode: Sequence[str], *, encode_timeout: float = 300.0,
                 startup_timeout: float = 120.0, upstream_api_key: str | None = None) -> None:
        if not encode or not prefill_decode:
            raise ValueError("a proxy needs at least one encode and one prefill-decode instance")
        self.encoders = [Instance(url.rstrip("/"), "encode") for url in encode]
        self.decoders = [Instance(url.rstrip("/"), "prefill_decode") for url in prefill_decode]
        self.encode_timeout = encode_timeout
        self.startup_timeout = startup_timeout
        upstream = {"authorization": f"Bearer {upstream_api_key}"} if upstream_api_key else None
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), headers=upstream)
        # Turns per role: one count stepped by both picks of a request gave every encode pick the same parity.
        self._ties = {role: itertools.count() for role in ("encode", "prefill_decode")}
        self._waits: set[asyncio.Task] = set()  # the awaits on instances in progress: what abort() cancels
        self._abort_message: str | None = None
        self.registry = CollectorRegistry()
        self.outstanding = Gauge("tt_models_proxy:outstanding_requests", "Requests in flight per instance.",
                                 ["instance", "role"], registry=self.registry)
        self.requests = Counter("tt_models_proxy:requests", "Requests by route and outcome.", ["route", "outcome"],
                                registry=self.registry)

    async def discover(self) -> None:
        """Each instance's name and models (waits for instances still starting); raises RuntimeError on a wrong
        role."""
        for instance in [*self.encoders, *self.decoders]:
            deadline = asyncio.get_running_loop().time() + self.startup_timeout
            while True:
                try:
                    info = (await self.client.get(f"{instance.url}/disagg/info")).raise_for_status().json()
                    break
                except httpx.HTTPError as error:
                    if asyncio.get_running_loop().time() > deadline:
                        raise RuntimeError(f"{instance.url} did not answer /disagg/info: {error}") from error
                    await asyncio.sleep(0.5)
            if info["role"] != instance.role:
                raise RuntimeError(f"{instance.url} is a {info['role']!r} instance, given as {instance.role!r}")
            instance.name, instance.models = info["instance"], info["models"]
            self.outstanding.labels(instance.url, instance.role).set(0)

    def _pick(self, instances: list[Instance], exclude: tuple[Instance, ...] = ()) -> Instance:
        now = time.monotonic()
        live = [i for i in instances if i.down_until <= now and i not in exclude] or \
            [i for i in instances if i not in exclude] or instances
        least = min(i.outstanding for i in live)
        candidates = [i for i in live if i.outstanding == least]
        chosen = candidates[next(self._ties[instances[0].role]) % len(candidates)]  # equally loaded: turns
        chosen.outstanding += 1
        self.outstanding.labels(chosen.url, chosen.role).set(chosen.outstanding)
        return chosen

    def _release(self, instance: Instance) -> None:
        instance.outstanding -= 1
        self.outstanding.labels(instance.url, instance.role).set(instance.outstanding)

    def abort(self, message: str) -> None:
        """End every request in progress (the drain's timeout passed): none waits for its instance any longer, and
        its client gets ``message``. Called on the event loop."""
        self._abort_message = message
        for wait in self._waits:
            wait.cancel()

    async def _abortable(self, awaitable: Awaitable[T]) -> T:
        """``awaitable``'s result; raises Aborted once :meth:`abort` was called. Closing what it waited on is the
        caller's: an instance sees the connection go and aborts the request, freeing its blocks."""
        if self._abort_message is not None:
            raise Aborted(self._abort_message)
        wait = asyncio.ensure_future(awaitable)
        self._waits.add(wait)
        try:
            return await wait
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._abort_message is not None and not (current and current.cancelling()):
                raise Aborted(self._abort_message) from None
            raise  # this request's own cancellation (its client left)
        finally:
            self._waits.discard(wait)

    def takes_encoder_input(self, path: str, body: bytes) -> bool:
        if path in _ENCODER_ROUTES:
            return True
        try:
            model = json.loads(body).get("model")
        except (ValueError, AttributeError):
            return False  # the prefill-decode instance answers the bad body with its 400
        return any(instance.models.get(model, {}).get("encoder") for instance in self.decoders)

    async def forward(self, path: str, request: Request) -> Response:
        body = await request.body()
        headers = {REQUEST_ID_HEADER: request_id.get() or uuid.uuid4().hex}  # the same id on every instance
        if "content-type" in request.headers:
            headers["content-type"] = request.headers["content-type"]
        decoder = self._pick(self.decoders)
        try:
            if self.takes_encoder_input(path, body):
                refused = await self._encode(path, body, headers, decoder.name)
                if refused is not None:
                    self.requests.labels(path, "encode_failed").inc()
                    self._release(decoder)
                    return refused
            upstream = await self._abortable(self.client.send(
                self.client.build_request("POST", decoder.url + path, content=body, headers=headers), stream=True))
        except Aborted as error:
            self.requests.labels(path, "aborted").inc()
            self._release(decoder)
            return _error(503, str(error), "server_shutting_down")
        except httpx.HTTPError as error:
            self.requests.labels(path, "prefill_decode_failed").inc()
            self._release(decoder)
            return _error(502, f"prefill-decode instance {decoder.url} failed: {type(error).__name__}: {error}",
                          "prefill_decode_failed")
        except BaseException:
            self._release(decoder)
            raise
        self.requests.labels(path, "forwarded").inc()

        streamed = upstream.headers.get("content-type", "").startswith("text/event-stream")

        async def relay() -> AsyncIterator[bytes]:
            chunks, last = upstream.aiter_raw(), b"\n\n"
            try:
                while (chunk := await self._abortable(anext(chunks, None))) is not None:
                    yield chunk
                    last = chunk
            except Aborted as error:
                if streamed:  # the stream's last event, as an instance's own stop sends it (an event the abort cut
                    # in two is ended first, so that this one still parses on its own)
                    cut = b"" if last.endswith(b"\n\n") else b"\n\n"
                    event = json.dumps(_error_body(str(error), "server_shutting_down"))
                    yield cut + f"data: {event}\n\ndata: [DONE]\n\n".encode()
            finally:
                await upstream.aclose()  # a client that left: the instance sees the disconnect and aborts
                self._release(decoder)

        return StreamingResponse(relay(), status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type"))

    async def _encode(self, path: str, body: bytes, headers: dict[str, str], decoder: str) -> Response | None:
        """Run the request on an encode instance, for the prefill-decode instance named ``decoder``; None when its
        encoder output is there, else the response for the client. An instance that is stopping is skipped as one
        that refuses connections, and the request goes to another under a new id in ``headers`` (the stopping one
        may have announced, then withdrawn, the old one)."""
        tried: tuple[Instance, ...] = ()
        while True:
            encoder = self._pick(self.encoders, exclude=tried)
            try:
                reply = await self._abortable(self.client.post(
                    encoder.url + path, content=body, headers={**headers, PREFILL_DECODE_HEADER: decoder},
                    timeout=httpx.Timeout(self.encode_timeout, connect=10.0)))
                if not _stopping(reply):
                    break
                encoder.down_until = time.monotonic() + _DOWN_SECONDS
                tried += (encoder,)
                if len(tried) == len(self.encoders):
                    break  # its 503 is the answer
                retry = uuid.uuid4().hex
                logger.warning("request %s: encode instance %s is stopping: skipped for %d s; sent to another as "
                               "request %s", headers[REQUEST_ID_HEADER], encoder.url, _DOWN_SECONDS, retry)
                headers[REQUEST_ID_HEADER] = retry
            except httpx.ConnectError as error:  # nothing was sent: another instance may take it
                encoder.down_until = time.monotonic() + _DOWN_SECONDS
                tried += (encoder,)
                logger.warning("request %s: encode instance %s refused the connection (%s): skipped for %d s",
                               headers[REQUEST_ID_HEADER], encoder.url, error, _DOWN_SECONDS)
                if len(tried) == len(self.encoders):
                    return _error(502, f"no encode instance accepts connections: {error}", "encode_failed")
            except httpx.TimeoutException:  # hung: skipped as a refusing one, so that the next requests do not wait
                encoder.down_until = time.monotonic() + _DOWN_SECONDS
                return _error(504, f"encode instance {encoder.url} did not answer within {self.encode_timeout:g} s",
                              "encode_timeout")
            except httpx.HTTPError as error:
                return _error(502, f"encode instance {encoder.url} failed: {type(error).__name__}: {error}",
                              "encode_failed")
            finally:
                self._release(encoder)
        if reply.status_code >= 400:
            return Response(reply.content, status_code=reply.status_code,
                            media_type=reply.headers.get("content-type"))
        failure = _stream_error(reply.content) if reply.headers.get("content-type", "").startswith(
            "text/event-stream") else None
        if failure is not None:
            return _error(502, f"encode instance {encoder.url}: {failure}", "encode_failed")
        return None

    async def health(self) -> Response:
        for instance in [*self.encoders, *self.decoders]:
            try:
                (await self.client.get(f"{instance.url}/health", timeout=5.0)).raise_for_status()
            except httpx.HTTPError as error:
                return _error(503, f"{instance.role} instance {instance.url} is unhealthy: {error}", "unhealthy")
        return Response(status_code=200)


def _stopping(reply: httpx.Response) -> bool:
    """Whether ``reply`` is an instance's refusal while it stops (``tt_models.server.shutdown``)."""
    if reply.status_code != 503:
        return False
    try:
        return reply.json()["error"]["code"] == "server_shutting_down"
    except (ValueError, KeyError, TypeError):
        return False


def create_proxy_app(proxy: Proxy) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await proxy.discover()
        try:
            yield
        finally:
            await proxy.client.aclose()

    app = FastAPI(title="tt-models proxy", summary="OpenAI-compatible front of encode and prefill-decode instances",
                  lifespan=lifespan)
    app.add_middleware(RequestContext, trust_client_id=False)  # the ids key encoder outputs: the proxy's own

    def forwarding(path: str):  # noqa: ANN202 (a route handler)
        async def route(request: Request) -> Response:
            return await proxy.forward(path, request)
        return route

    for path in (*_JSON_ROUTES, *_ENCODER_ROUTES):
        app.add_api_route(path, forwarding(path), methods=["POST"])

    @app.get("/v1/models")
    async def models() -> Response:
        reply = await proxy.client.get(f"{proxy.decoders[0].url}/v1/models")
        return Response(reply.content, status_code=reply.status_code, media_type=reply.headers.get("content-type"))

    @app.get("/health")
    async def health() -> Response:
        return await proxy.health()

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(proxy.registry), media_type=CONTENT_TYPE_LATEST)

    return app
