"""An asyncio front of one ``LLMEngine``: the engine's own thread (``engine_thread``) runs its loop, coroutines submit
and stream.

The engine is not thread-safe, so only the loop thread touches it: coroutines hand it commands (add, abort)
through a thread-safe queue, and it hands each step's outputs to the submitting event loops with
``call_soon_threadsafe``, once per loop. While the engine has requests the thread drains the commands and steps;
idle, it blocks on the command queue, so an idle server costs nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import queue
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import RequestOutput
from tt_models.engine.prompts import PromptType
from tt_models.engine.sampling import SamplingParams
from tt_models.server.engine_thread import thread_of
from tt_models.server.errors import EngineFailed, ShuttingDown

logger = logging.getLogger(__name__)


class RequestStream:
    """The outputs of one request, cumulative as the engine returns them, until the finished one.

    Closing it before the end, or dropping it, aborts the request, which frees its KV blocks.
    """

    def __init__(self, request_id: str, outputs: asyncio.Queue, abort: Callable[[str], None]) -> None:
        self.request_id = request_id
        self.finished = False
        self._outputs = outputs
        self._abort = weakref.finalize(self, abort, request_id)
        self._abort.atexit = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        items = [await self._outputs.get()]
        while not self._outputs.empty():  # outputs are cumulative: a slow reader needs only the latest
            items.append(self._outputs.get_nowait())
        error = next((item for item in items if isinstance(item, BaseException)), None)
        if error is not None or items[-1].finished:
            self.finished = True
            self._abort.detach()  # the engine is done with it either way
        if error is not None:
            raise error
        return items[-1]

    def close(self) -> None:
        """Abort the request unless it finished."""
        self.finished = True
        self._abort()


class AsyncEngine:
    """``engine`` served to coroutines of any event loop. ``on_finished`` runs on the loop thread with the final
    output of every request, aborted ones included (their ``finish_reason`` is ``"abort"``); ``on_step`` with the
    engine after each of its steps."""

    def __init__(self, engine: LLMEngine, on_finished: Callable[[RequestOutput], None] | None = None,
                 on_step: Callable[[LLMEngine], None] | None = None) -> None:
        self.engine = engine
        self._on_finished = on_finished
        self._on_step = on_step
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        # request id -> (its event loop, its output queue); touched by the loop thread only.
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._running = False
        self._loop: Future | None = None  # the loop's run on the engine's thread

    # Any thread.

    def start(self) -> None:
        self.engine.set_waker(partial(self._commands.put, self._service))
        self._running = True
        self._loop = thread_of(self.engine).submit(self._run)
        self._loop.add_done_callback(_report_crash)

    def shutdown(self) -> None:
        """Stop the loop after its current step; unfinished requests are aborted. The engine stays open."""
        if self.is_alive:
            self._commands.put(self._stop)
            self._loop.exception()  # (waits; a crash is logged already)

    @property
    def is_alive(self) -> bool:
        return self._loop is not None and not self._loop.done()

    def abort(self, request_id: str) -> None:
        self._commands.put(partial(self._abort, request_id))

    def fail_all(self, error: EngineFailed) -> None:
        """End every request now with ``error`` (raised to its reader), its blocks freed; the loop goes on."""
        self._commands.put(partial(self._fail_all, error))

    # Event loops.

    async def add(self, request_id: str, prompt: PromptType, params: SamplingParams, *,
                  language: str | None = None, task: str | None = None, previous_text: str | None = None,
                  max_tokens_param: str | None = None) -> RequestStream:
        """Queue a request; raises the engine's refusal (ValueError, OverflowError) as ``add_request`` does."""
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue = asyncio.Queue()
        accepted = loop.create_future()
        # The engine adds it in this task's context: what the server knows of the HTTP request (the encode
        # instance's target in tt_models.disagg.routing) reaches the engine.
        context = contextvars.copy_context()
        self._commands.put(partial(context.run, self._add, loop, outputs, accepted, request_id, prompt, params,
                                   dict(language=language, task=task, previous_text=previous_text,
                                        max_tokens_param=max_tokens_param)))
        await accepted
        return RequestStream(request_id, outputs, self.abort)

    def _accept(self, accepted: asyncio.Future, error: BaseException | None, request_id: str) -> None:
        if accepted.cancelled():  # the caller went away while the request was queued: nobody will read it
            if error is None:
                self.abort(request_id)
        elif error is None:
            accepted.set_result(None)
        else:
            accepted.set_exception(error)

    # The loop thread.

    def _run(self) -> None:
        while self._running:
            self._drain(block=not self.engine.has_unfinished_requests())
            if self._running and self.engine.has_unfinished_requests():
                self._step()
        self._fail_all(ShuttingDown("the server is shutting down"))

    def _drain(self, block: bool) -> None:
        try:
            command = self._commands.get(block=block)
            while True:
                command()
                command = self._commands.get_nowait()
        except queue.Empty:
            pass

    def _stop(self) -> None:
        self._running = False

    def _add(self, loop: asyncio.AbstractEventLoop, outputs: asyncio.Queue, accepted: asyncio.Future,
             request_id: str, prompt: PromptType, params: SamplingParams, kwargs: dict[str, Any]) -> None:
        error = None
        try:
            self.engine.add_request(request_id, prompt, params, **kwargs)
        except Exception as refused:  # for the caller to report (ValueError, OverflowError) or raise
            error = refused
            # Its message may quote the prompt's tokens: at debug only.
            logger.info("request %s refused (%s)", request_id, type(refused).__name__)
            logger.debug("request %s refused: %s", request_id, refused)
        else:
            self._streams[request_id] = (loop, outputs)
        if not _call(loop, self._accept, accepted, error, request_id) and error is None:
            self._abort(request_id)

    def _abort(self, request_id: str) -> None:
        if self._streams.pop(request_id, None) is None:
            return  # finished already
        output = self.engine.abort_request(request_id)
        if output is not None:
            self._finished(output)

    def _step(self) -> None:
        self._run_engine(self.engine.step)

    def _service(self) -> None:
        """Engine work that is not a model step (encoder outputs received, transfer notices): woken by the engine."""
        self._run_engine(self.engine.service)

    def _run_engine(self, work: Callable[[], list[RequestOutput]]) -> None:
        try:
            outputs = work()
        except Exception as error:  # fail the requests, not the server
            logger.exception("engine step failed; ending its %d requests", len(self._streams))
            self._fail_all(EngineFailed(f"the engine failed: {type(error).__name__}: {error}"))
            return
        if self._on_step is not None:
            self._on_step(self.engine)
        # One hand-over per event loop per step: each call_soon_threadsafe writes to the loop's wake-up pipe (32
        # streams took 114 µs of this thread a step, one call 4 µs).
        deliveries: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, RequestOutput | BaseException]]] = {}
        running: dict[asyncio.AbstractEventLoop, list[str]] = {}  # the requests still running, per loop
        for output in outputs:
            target = self._streams.get(output.request_id)
            if output.finished:
                self._streams.pop(output.request_id, None)
                self._finished(output)
            if target is None:
                continue
            loop, stream = target
            deliveries.setdefault(loop, []).append((stream, output if output.error is None else output.error))
            if not output.finished:
                running.setdefault(loop, []).append(output.request_id)
        for loop, items in deliveries.items():
            if not _call(loop, _deliver, items):
                for request_id in running.get(loop, ()):
                    self._abort(request_id)  # its event loop is gone

    def _fail_all(self, error: EngineFailed) -> None:
        for request_id, (loop, outputs) in list(self._streams.items()):
            del self._streams[request_id]
            logger.warning("request %s ended: %s", request_id, error)
            try:
                self.engine.abort_request(request_id)
            except Exception:
                logger.exception("abort of %s after the failed step failed too", request_id)
            _call(loop, outputs.put_nowait, error)

    def _finished(self, output: RequestOutput) -> None:
        reasons = sorted({str(seq.finish_reason) for seq in output.outputs})
        if output.error is not None:
            logger.warning("request %s failed: %s", output.request_id, output.error)
        else:
            logger.info("request %s %s: %d prompt tokens, %d generated", output.request_id,
                        "aborted" if reasons == ["abort"] else f"finished ({', '.join(reasons)})",
                        len(output.prompt_token_ids or ()) + len(output.encoder_prompt_token_ids or ()),
                        sum(len(seq.token_ids) for seq in output.outputs))
        if self._on_finished is not None:
            try:
                self._on_finished(output)
            except Exception:
                logger.exception("on_finished failed for %s", output.request_id)


def _report_crash(loop: Future) -> None:
    if loop.exception() is not None:
        logger.error("the engine loop crashed", exc_info=loop.exception())


def _deliver(items: list[tuple[asyncio.Queue, Any]]) -> None:
    """On a stream's event loop: each item into its stream's queue, in the engine's order."""
    for outputs, item in items:
        outputs.put_nowait(item)


def _call(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> bool:
    """Run ``callback`` on ``loop``; False when the loop is closed."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        return False
    return True
