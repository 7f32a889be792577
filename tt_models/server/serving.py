"""What every generation endpoint does: submit engine requests, answer once they finish, count usage."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from fastapi import Request, Response
from pydantic import BaseModel

from tt_models.engine.outputs import RequestOutput
from tt_models.engine.prompts import PromptType
from tt_models.engine.sampling import SamplingParams
from tt_models.server.async_engine import AsyncEngine, RequestStream
from tt_models.server.errors import engine_errors
from tt_models.server.protocol import Usage
from tt_models.disagg.request_context import request_id
from tt_models.server.streaming import final_outputs, unless_disconnected

logger = logging.getLogger(__name__)

CLIENT_CLOSED = 499  # nginx's status for a client that left: nobody reads it, but logs show it


def new_id(prefix: str) -> tuple[str, int]:
    """A response id and its creation time (Unix seconds); from the client's ``X-Request-Id`` when it sent one
    (the proxy of a disaggregated deployment does: the ids then match on every instance)."""
    return f"{prefix}-{request_id.get() or uuid.uuid4().hex}", int(time.time())


async def submit(engine: AsyncEngine, response_id: str, prompts: Sequence[PromptType],
                 params: SamplingParams | Sequence[SamplingParams], **kwargs: str | None) -> list[RequestStream]:
    """One engine request per prompt, with ``params`` or its own of a sequence of them (as ``LLM.generate`` takes
    them); if one is refused, the others are aborted and the refusal raised as an ``APIError``."""
    each = params if isinstance(params, Sequence) else [params] * len(prompts)
    # The prompts (and the parameters: stop strings, grammars) are the clients' data: only at debug.
    logger.info("request %s received: %d engine request(s)", response_id, len(prompts))
    if logger.isEnabledFor(logging.DEBUG):
        for i, (prompt, one) in enumerate(zip(prompts, each)):
            logger.debug("request %s-%d: prompt %r, %r", response_id, i, loggable(prompt), one)
    streams: list[RequestStream] = []
    try:
        with engine_errors():
            for i, (prompt, one) in enumerate(zip(prompts, each, strict=True)):
                streams.append(await engine.add(f"{response_id}-{i}", prompt, one, **kwargs))
    except BaseException:
        for stream in streams:
            stream.close()
        raise
    return streams


def loggable(prompt: PromptType) -> Any:
    """``prompt`` for a debug line: its arrays (audio, pixels) as their shapes."""
    if isinstance(prompt, dict):
        return {key: f"<{type(value).__name__} {tuple(value.shape)}>" if hasattr(value, "shape") else value
                for key, value in prompt.items()}
    return prompt


async def finish(request: Request, streams: Sequence[RequestStream]) -> list[RequestOutput] | None:
    """The final outputs, or None if the client left first (its requests are aborted then)."""
    try:
        return await unless_disconnected(request, final_outputs(streams))
    finally:
        for stream in streams:
            stream.close()


def json_response(body: BaseModel | None) -> Response:
    if body is None:
        return Response(status_code=CLIENT_CLOSED)
    return Response(body.model_dump_json(), media_type="application/json")


def usage(outputs: Sequence[RequestOutput]) -> Usage:
    """Prompt tokens count both prompts of encoder-decoder models."""
    prompt = sum(len(o.prompt_token_ids) + len(o.encoder_prompt_token_ids or ()) for o in outputs)
    completion = sum(len(seq.token_ids) for o in outputs for seq in o.outputs)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
