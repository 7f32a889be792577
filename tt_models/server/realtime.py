"""GET /v1/realtime: live transcription over OpenAI's Realtime API (WebSocket, ``intent=transcription``).

The client's events are parsed here (pydantic models of the events a transcription session takes); the session's state
machine, its audio, turn detection and the events it answers with are ``tt_models.speech.realtime_session``'s. Each
committed turn is transcribed over the model's engine beside every other request (as a streamed
``/v1/audio/transcriptions`` request runs: ``LongFormTranscription``'s engine batches, its text as it grows), while the
session goes on receiving audio. A bad event gets the Realtime ``error`` event and the session continues; a client that
disconnects has its turns' requests aborted (their KV blocks freed) at once.

The handshake: ``?model=`` names a served Whisper model (404 for an unknown one, 400 for one that is not Whisper),
without it the session starts with the first Whisper model served (``session.update`` may name another); ``intent``,
if given, is ``transcription``. ``--api-key`` applies (``auth.py``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Literal

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tt_models.server.async_engine import AsyncEngine, RequestStream
from tt_models.server.errors import APIError, as_api_error
from tt_models.server.transcription_rounds import Transcribed, growing_text
from tt_models.speech.realtime_session import RealtimeError, RealtimeSession, Turn, error_event

logger = logging.getLogger(__name__)

Send = Callable[[list[dict]], Awaitable[None]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnDetectionConfig(_Strict):
    type: str = "server_vad"
    threshold: float | None = None
    prefix_padding_ms: int | None = None
    silence_duration_ms: int | None = None
    create_response: bool | None = None  # (a conversation session's: no responses here)
    interrupt_response: bool | None = None


class AudioFormatConfig(_Strict):
    type: str | None = None
    rate: int | None = None


class TranscriptionConfig(_Strict):
    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class AudioInputConfig(_Strict):
    format: AudioFormatConfig | None = None
    noise_reduction: dict | None = None
    transcription: TranscriptionConfig | None = None
    turn_detection: TurnDetectionConfig | None = None


class AudioConfig(_Strict):
    input: AudioInputConfig | None = None


class SessionConfig(_Strict):
    type: str = "transcription"
    audio: AudioConfig | None = None
    include: list[str] | None = None


class SessionUpdate(_Strict):
    type: Literal["session.update"]
    session: SessionConfig
    event_id: str | None = None


class BufferAppend(_Strict):
    type: Literal["input_audio_buffer.append"]
    audio: str
    event_id: str | None = None


class BufferCommit(_Strict):
    type: Literal["input_audio_buffer.commit"]
    event_id: str | None = None


class BufferClear(_Strict):
    type: Literal["input_audio_buffer.clear"]
    event_id: str | None = None


ClientEvent = TypeAdapter(Annotated[SessionUpdate | BufferAppend | BufferCommit | BufferClear,
                                    Field(discriminator="type")])


def speech_models(served: Mapping[str, AsyncEngine]) -> dict[str, AsyncEngine]:
    return {name: engine for name, engine in served.items()
            if engine.engine.checkpoint.config.model_type == "whisper" and engine.engine.decodes}


def handshake_error(served: Mapping[str, AsyncEngine], model: str | None, intent: str | None) -> APIError | None:
    """Why the connection is refused, if it is."""
    speech = speech_models(served)
    if intent is not None and intent != "transcription":
        return APIError(400, f"intent {intent!r} is not served: this server has transcription sessions only "
                        "(intent=transcription)", param="intent")
    if model is not None and model not in served:
        return APIError(404, f"The model `{model}` does not exist; this server has {sorted(served)}", param="model",
                        code="model_not_found")
    if model is not None and model not in speech:
        return APIError(400, f"{model} does not take audio: realtime transcription needs a Whisper model",
                        param="model")
    if not speech:
        return APIError(400, f"No speech model is served here ({sorted(served)}): realtime transcription needs a "
                        "Whisper model", param="model")
    return None


async def run_session(websocket: WebSocket, served: Mapping[str, AsyncEngine], model: str | None) -> None:
    """The accepted connection's session until the client leaves."""
    speech = speech_models(served)
    session = RealtimeSession({name: engine.engine.processor for name, engine in speech.items()},
                              model or next(iter(speech)))
    lock = asyncio.Lock()
    turns: set[asyncio.Task] = set()

    async def send(events: list[dict]) -> None:
        async with lock:  # one event at a time: a turn's events stay in order among the others
            for event in events:
                await websocket.send_text(json.dumps(event))

    await send(session.created())
    logger.info("realtime session %s started with %s", session.id, session.model)
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            events, committed = _handle(session, message)
            await send(events)
            for turn in committed:
                task = asyncio.create_task(_transcribe(session, turn, speech[turn.model], send))
                turns.add(task)
                task.add_done_callback(turns.discard)
    except WebSocketDisconnect:
        pass
    finally:
        for task in list(turns):  # their streams close: the requests are aborted, their blocks freed
            task.cancel()
        if turns:
            await asyncio.gather(*turns, return_exceptions=True)
        logger.info("realtime session %s ended", session.id)


def _handle(session: RealtimeSession, message: dict) -> tuple[list[dict], list[Turn]]:
    """One client message: the session's events and the turns it committed, or the error event for it."""
    event_id = None
    try:
        if message.get("text") is None:
            raise RealtimeError("invalid_event", "Events are JSON text messages, not binary ones")
        try:
            data = json.loads(message["text"])
        except json.JSONDecodeError as error:
            raise RealtimeError("invalid_json", f"The event is not valid JSON: {error}") from None
        if isinstance(data, dict) and isinstance(data.get("event_id"), str):
            event_id = data["event_id"]
        try:
            event = ClientEvent.validate_python(data)
        except ValidationError as error:
            raise _invalid(data, error) from None
        if isinstance(event, SessionUpdate):
            return session.update(event.session.model_dump(exclude_unset=True)), []
        if isinstance(event, BufferAppend):
            try:
                audio = base64.b64decode(event.audio, validate=True)
            except (binascii.Error, ValueError) as error:
                raise RealtimeError("invalid_value", f"audio is not base64: {error}", "audio") from None
            return session.append(audio)
        if isinstance(event, BufferCommit):
            return session.commit()
        return session.clear(), []
    except RealtimeError as error:
        return [error_event(error, event_id)], []


def _invalid(data: object, error: ValidationError) -> RealtimeError:
    kind = data.get("type") if isinstance(data, dict) else None
    first = error.errors()[0]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return RealtimeError("invalid_value", f"Unsupported event type {kind!r}: a transcription session takes "
                             "session.update, input_audio_buffer.append, input_audio_buffer.commit and "
                             "input_audio_buffer.clear", "type")
    where = ".".join(str(part) for part in first["loc"][1:])  # past the union's tag
    if first["type"] == "extra_forbidden":
        return RealtimeError("unknown_parameter", f"Unknown parameter: '{where}'", where)
    return RealtimeError("invalid_value", f"Invalid {kind} event: '{where}': {first['msg']}", where)


async def _transcribe(session: RealtimeSession, turn: Turn, engine: AsyncEngine, send: Send) -> None:
    """The turn through the engine, its text sent as it grows, then ``completed`` (or ``failed``)."""
    streams: list[RequestStream] = []
    try:
        async for text in growing_text(turn.job, engine, turn.item_id, streams):
            if isinstance(text, Transcribed):
                done = text
                break
            await send(session.transcribing(turn, text))
    except Exception as error:  # the engine's failure ends this turn only
        failure = as_api_error(error)
        logger.warning("realtime session %s: the transcription of %s failed: %s", session.id, turn.item_id, failure)
        await send(session.failed(turn, RealtimeError(failure.info.code or "transcription_failed",
                                                      failure.info.message)))
        return
    finally:  # (cancelled when the client leaves: the requests under way are aborted, their blocks freed)
        for stream in streams:
            stream.close()
    await send(session.completed(turn, done.transcript, done.prompt_tokens, done.output_tokens))
