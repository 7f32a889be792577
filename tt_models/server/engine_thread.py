"""Each engine is built on the thread that will step it.

torch runs parallel work on an OpenMP pool owned by the thread that starts it. An engine built on the main thread and
stepped on another leaves two pools; with more pool threads than cores, libgomp throttles its workers' spin-wait, so
every op's workers sleep and wake again. Measured on 2 cores (host backend): a 4x576 @ 576x1536 matmul took 187 us
on the thread that had loaded the model and 272 us on another; SmolLM2-135M decoded 4.5 tokens/s instead of 6.8.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

E = TypeVar("E")

_threads: weakref.WeakKeyDictionary[Any, EngineThread] = weakref.WeakKeyDictionary()


class EngineThread:
    """A daemon thread that runs the calls given to it, one after the other."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], E]) -> Future[E]:
        done: Future = Future()
        self._calls.put((call, done))
        return done

    def _serve(self) -> None:
        while True:
            call, done = self._calls.get()
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(call())
                except BaseException as error:
                    done.set_exception(error)
            del call, done  # the engine a build returned is not kept alive by this thread


def build_on_own_thread(build: Callable[[], E], name: str) -> E:
    """``build()`` run on a new engine thread, which :func:`thread_of` gives for the engine it returns."""
    thread = EngineThread(f"tt-models-engine-{name}")
    engine = thread.submit(build).result()
    _threads[engine] = thread
    return engine


def thread_of(engine: Any) -> EngineThread:
    """The thread ``engine`` was built on, or a new one for an engine built elsewhere (by a test, or a program
    that serves engines it built)."""
    thread = _threads.get(engine)
    if thread is None:
        thread = _threads[engine] = EngineThread("tt-models-engine")
    return thread
