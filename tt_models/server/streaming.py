"""Server-sent events, the deltas a stream sends, and the end of requests whose client went away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from tt_models.engine.outputs import CompletionOutput, RequestOutput
from tt_models.engine.sampling import SamplingParams
from tt_models.server.async_engine import RequestStream
from tt_models.server.errors import as_api_error

T = TypeVar("T")

DONE = "data: [DONE]\n\n"


def sse(body: BaseModel) -> str:
    return f"data: {body.model_dump_json()}\n\n"


def sse_error(error: Exception) -> str:
    """An error after the stream began (the status is sent already): OpenAI clients raise on this event."""
    return sse(as_api_error(error).body())


def event_stream(events: AsyncIterator[str], streams: Sequence[RequestStream]) -> StreamingResponse:
    """``events``, then [DONE]: an error raised meanwhile becomes an error event (the status is sent already), and
    ``streams`` (the requests the events come from, which ``events`` may replace as it goes) are closed however the
    response ends. Starlette cancels it when the client disconnects: closing the streams aborts their requests."""
    return StreamingResponse(_ended(events, streams), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


async def _ended(events: AsyncIterator[str], streams: Sequence[RequestStream]) -> AsyncIterator[str]:
    try:
        async for event in events:
            yield event
    except Exception as error:
        yield sse_error(error)
    finally:
        for stream in streams:
            stream.close()
    yield DONE


class Deltas:
    """What each sequence of a streamed request has not sent yet.

    A finished text drops a matched stop string, so text that could still turn out to begin one is held
    back until it cannot (vLLM's rule): sent text is then always a prefix of the final text.
    """

    def __init__(self, params: SamplingParams) -> None:
        longest = max((len(s) for s in params.stop), default=0)
        self._hold = 0 if params.include_stop_str_in_output else max(longest - 1, 0)
        self._sent: dict[tuple[int, int], tuple[int, int]] = {}  # (stream, sequence) -> (chars, tokens) sent

    def advance(self, key: tuple[int, int], output: CompletionOutput) -> tuple[str, int] | None:
        """``(new text, index of the first unsent token)``, or None when there is nothing to send yet."""
        chars, tokens = self._sent.get(key, (0, 0))
        text = output.text
        if output.finish_reason is None:
            text = text[:max(len(text) - self._hold, chars)]
            if len(text) == chars:
                return None
        self._sent[key] = (len(text), len(output.token_ids))
        return text[chars:], tokens


async def merge(streams: Sequence[RequestStream]) -> AsyncIterator[tuple[int, RequestOutput]]:
    """The outputs of several streams as they come, with the index of their stream."""
    if len(streams) == 1:
        async for output in streams[0]:
            yield 0, output
        return
    merged: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: RequestStream) -> None:
        try:
            async for output in stream:
                merged.put_nowait((index, output))
        except Exception as error:
            merged.put_nowait((index, error))
        merged.put_nowait((index, None))

    tasks = [asyncio.create_task(pump(i, stream)) for i, stream in enumerate(streams)]
    try:
        remaining = len(streams)
        while remaining:
            index, item = await merged.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()


async def final_outputs(streams: Sequence[RequestStream]) -> list[RequestOutput]:
    finals: list[RequestOutput | None] = [None] * len(streams)
    async for index, output in merge(streams):
        finals[index] = output
    return finals


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None if the client disconnects first (``work`` is cancelled then)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        task.cancel()
    return task.result() if task in done else None


async def _disconnect(request: Request) -> None:
    # The body is read already: the next ASGI message is the disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass
