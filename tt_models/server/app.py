"""The FastAPI application: OpenAI's routes over one ``AsyncEngine`` per served model."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated

from fastapi import FastAPI, File, Form, Request, Response, UploadFile, WebSocket
from fastapi.responses import JSONResponse

from tt_models.disagg.encode_engine import EncodeEngine
from tt_models.disagg.metrics import DisaggState
from tt_models.disagg.routing import Role
from tt_models.engine.config import uses_cross_attention
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server.async_engine import AsyncEngine
from tt_models.server.chat import create_chat_completion
from tt_models.server.completions import create_completion
from tt_models.server.errors import APIError, install_error_handlers
from tt_models.server.media_policy import MediaPolicy
from tt_models.server.metrics import ServerMetrics, kv_blocks_in_use
from tt_models.disagg.request_context import RequestContext
from tt_models.server.protocol import (AudioResponseFormat, ChatCompletionRequest, CompletionRequest, ModelCard,
                                       ModelList)
from tt_models.server.realtime import handshake_error, run_session
from tt_models.server.tools import ToolSettings
from tt_models.server.transcriptions import AudioRequest, create_transcription

logger = logging.getLogger(__name__)


def create_app(engines: Mapping[str, LLMEngine | EncodeEngine], *, close_engines: bool = False, role: Role = "both",
               instance: str | None = None, media_policy: MediaPolicy = MediaPolicy(),
               tool_settings: ToolSettings = ToolSettings()) -> FastAPI:
    """An app serving ``engines`` under their names (the ``model`` of requests).

    The engine loops start and stop with the app (its lifespan). ``close_engines``: the app owns the engines
    and closes them (their devices) at shutdown; otherwise they stay the caller's. ``role`` and ``instance`` (its
    name on the broker) describe an instance of a disaggregated deployment (``tt_models.disagg``): an encode
    instance serves :class:`EncodeEngine` objects. ``media_policy``: the image URLs the server fetches (default:
    http(s) URLs of global addresses only). ``tool_settings``: auto tool choice and its parser (default: off).
    """
    if not engines:
        raise ValueError("create_app needs at least one engine")
    metrics = ServerMetrics(engines)
    if role != "both":
        metrics.registry.register(DisaggState(engines))
    served = {name: AsyncEngine(engine, on_finished=partial(metrics.observe, name),
                                on_step=partial(metrics.observe_step, name) if engine.decodes else None)
              for name, engine in engines.items()}
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for engine in served.values():
            engine.start()
        try:
            yield
        finally:
            for name, engine in served.items():
                engine.shutdown()
                if getattr(engine.engine, "scheduler", None) is not None:  # (an encode instance's has no KV cache)
                    logger.info("%s stopped with %d KV blocks in use", name, kv_blocks_in_use(engine.engine))
                if close_engines:
                    engine.engine.close()

    app = FastAPI(title="tt-models", summary="OpenAI-compatible API over tt-models' engine", lifespan=lifespan)
    app.state.engines = served
    app.state.metrics = metrics
    app.state.media_policy = media_policy
    app.state.tool_settings = tool_settings
    app.add_middleware(RequestContext)
    install_error_handlers(app)

    def engine_for(model: str) -> AsyncEngine:
        if model not in served:
            raise APIError(404, f"The model `{model}` does not exist; this server has {sorted(served)}",
                           param="model", code="model_not_found")
        return served[model]

    @app.get("/health")
    async def health() -> Response:
        dead = [name for name, engine in served.items() if not engine.is_alive]
        if dead:
            raise APIError(503, f"The engine loop of {dead} is not running")
        return Response(status_code=200)

    @app.get("/disagg/info")
    async def disagg_info() -> dict:
        """What a proxy needs to know of this instance: its role, its name on the broker, and which models take
        encoder inputs."""
        return {"role": role, "instance": instance,
                "models": {name: {"encoder": uses_cross_attention(engine.engine.checkpoint.config)}
                           for name, engine in served.items()}}

    @app.get("/metrics")
    async def prometheus() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=name, created=created, root=str(engine.engine.checkpoint.source),
                                         max_model_len=engine.engine.config.max_model_len)
                               for name, engine in served.items()])

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await create_completion(body, engine_for(body.model), body.model, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await create_chat_completion(body, engine_for(body.model), body.model, request)

    async def audio(task: str, request: Request, file: UploadFile, model: str, language: str | None,
                    prompt: str | None, response_format: AudioResponseFormat, temperature: float, stream: bool,
                    timestamp_granularities: list[str] | None) -> Response:
        form = AudioRequest(model, task, language, prompt, temperature, response_format, stream,
                            timestamp_granularities)
        engine = engine_for(model)
        return await create_transcription(form, await file.read(), engine, request)

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(
        request: Request, file: Annotated[UploadFile, File()], model: Annotated[str, Form()],
        language: Annotated[str | None, Form()] = None, prompt: Annotated[str | None, Form()] = None,
        response_format: Annotated[AudioResponseFormat, Form()] = "json",
        temperature: Annotated[float, Form()] = 0.0, stream: Annotated[bool, Form()] = False,
        timestamp_granularities: Annotated[list[str] | None, Form(alias="timestamp_granularities[]")] = None,
    ) -> Response:
        return await audio("transcribe", request, file, model, language, prompt, response_format, temperature,
                           stream, timestamp_granularities)

    @app.post("/v1/audio/translations")
    async def translations(
        request: Request, file: Annotated[UploadFile, File()], model: Annotated[str, Form()],
        language: Annotated[str | None, Form()] = None, prompt: Annotated[str | None, Form()] = None,
        response_format: Annotated[AudioResponseFormat, Form()] = "json",
        temperature: Annotated[float, Form()] = 0.0, stream: Annotated[bool, Form()] = False,
        timestamp_granularities: Annotated[list[str] | None, Form(alias="timestamp_granularities[]")] = None,
    ) -> Response:
        return await audio("translate", request, file, model, language, prompt, response_format, temperature,
                           stream, timestamp_granularities)

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket, model: str | None = None, intent: str | None = None) -> None:
        refusal = handshake_error(served, model, intent)
        if refusal is not None:
            await websocket.send_denial_response(JSONResponse(refusal.body().model_dump(),
                                                              status_code=refusal.status_code))
            return
        await websocket.accept()
        await run_session(websocket, served, model)

    return app
