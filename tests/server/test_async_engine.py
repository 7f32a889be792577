"""The asyncio front over a scripted engine: outputs reach the coroutines in order, refusals raise, closing a
stream aborts its request, and a failed step fails its requests but not the loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from tt_models.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from tt_models.engine.sampling import SamplingParams
from tt_models.server.async_engine import AsyncEngine
from tt_models.server.errors import EngineFailed


class ScriptedEngine:
    """Each step (1 ms) appends one character of the prompt to every request's output; ``fail_next`` makes a step
    raise."""

    def __init__(self) -> None:
        self.requests: dict[str, tuple[str, list[str]]] = {}
        self.aborted: list[str] = []
        self.fail_next = False

    def add_request(self, request_id, prompt, params, **kwargs):
        if not prompt:
            raise ValueError("The prompt is empty")
        if len(self.requests) >= 4:
            raise OverflowError("the waiting queue is full (4 requests)")
        self.requests[request_id] = (prompt, [])

    def has_unfinished_requests(self):
        return bool(self.requests)

    def set_waker(self, wake):  # no work but steps: nothing wakes the loop
        pass

    def service(self):
        return []

    def abort_request(self, request_id):
        self.aborted.append(request_id)
        prompt, out = self.requests.pop(request_id)
        return self._output(request_id, out, "abort")

    def step(self):
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("device lost")
        time.sleep(0.001)
        outputs = []
        for request_id, (prompt, out) in list(self.requests.items()):
            out.append(prompt[len(out)])
            done = len(out) == len(prompt)
            if done:
                del self.requests[request_id]
            outputs.append(self._output(request_id, out, "length" if done else None))
        return outputs

    @staticmethod
    def _output(request_id, out, reason):
        completion = CompletionOutput(0, "".join(out), list(range(len(out))), None, None, reason)
        return RequestOutput(request_id, None, [], None, [completion], reason is not None, RequestMetrics(0.0))


@pytest.fixture
def scripted():
    engine = ScriptedEngine()
    finished: list[RequestOutput] = []
    front = AsyncEngine(engine, on_finished=finished.append)
    front.start()
    yield engine, front, finished
    front.shutdown()
    assert not front.is_alive


async def texts(stream) -> list[str]:
    return [output.outputs[0].text async for output in stream]


def test_concurrent_requests_stream_cumulative_outputs(scripted):
    engine, front, finished = scripted

    async def main():
        streams = [await front.add(f"r{i}", word, SamplingParams()) for i, word in enumerate(["abc", "hello"])]
        return await asyncio.gather(*(texts(s) for s in streams))

    abc, hello = asyncio.run(main())
    assert abc[-1] == "abc" and hello[-1] == "hello"
    assert all(b.startswith(a) for seq in (abc, hello) for a, b in zip(seq, seq[1:]))  # cumulative, in order
    assert sorted(o.request_id for o in finished) == ["r0", "r1"] and engine.aborted == []


def test_refusals_raise_in_the_caller(scripted):
    engine, front, _ = scripted

    async def main():
        with pytest.raises(ValueError, match="empty"):
            await front.add("empty", "", SamplingParams())
        streams = [await front.add(f"r{i}", "x" * 1000, SamplingParams()) for i in range(4)]
        with pytest.raises(OverflowError, match="queue is full"):
            await front.add("one-too-many", "x", SamplingParams())
        for stream in streams:
            stream.close()

    asyncio.run(main())


def test_closing_a_stream_aborts_its_request(scripted):
    engine, front, finished = scripted

    async def main():
        stream = await front.add("long", "x" * 10_000, SamplingParams())
        first = await anext(stream)
        stream.close()
        return first

    assert asyncio.run(main()).outputs[0].text.startswith("x")
    for _ in range(200):  # the loop thread handles the abort
        if engine.aborted:
            break
        time.sleep(0.01)
    assert engine.aborted == ["long"] and finished[-1].outputs[0].finish_reason == "abort"
    assert not engine.has_unfinished_requests()


def test_a_failed_step_fails_its_requests_and_the_loop_goes_on(scripted):
    engine, front, _ = scripted

    async def main():
        engine.fail_next = True
        stream = await front.add("doomed", "abc", SamplingParams())
        with pytest.raises(EngineFailed, match="device lost"):
            await texts(stream)
        return await texts(await front.add("next", "ok", SamplingParams()))

    assert asyncio.run(main())[-1] == "ok"
    assert engine.aborted == ["doomed"]


def test_a_step_reaches_each_event_loop_in_one_hand_over(scripted, monkeypatch):
    """The engine thread wakes a loop once per step, whatever the number of its streams (each wake-up is a write to
    the loop's pipe, on the engine thread)."""
    engine, front, _ = scripted
    handed: list[list[str]] = []  # per hand-over to the loop: the request ids of its outputs

    async def main():
        loop = asyncio.get_running_loop()
        call = loop.call_soon_threadsafe

        def counted(callback, *args):
            if args and isinstance(args[0], list):
                handed.append([item.request_id for _, item in args[0]])
            return call(callback, *args)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
        streams = [await front.add(f"r{i}", "x" * 30, SamplingParams()) for i in range(3)]
        return await asyncio.gather(*(texts(s) for s in streams))

    assert all(t[-1] == "x" * 30 for t in asyncio.run(main()))
    assert sum(map(len, handed)) == 3 * 30  # every output, each in one hand-over
    assert all(len(ids) == len(set(ids)) for ids in handed)  # one per request per step: a step per hand-over
    assert max(map(len, handed)) == 3


def test_a_gone_event_loop_aborts_its_requests_and_the_others_go_on(scripted):
    engine, front, finished = scripted
    gone = asyncio.new_event_loop()
    gone.run_until_complete(front.add("orphan", "x" * 10_000, SamplingParams()))
    gone.close()  # its streams can no longer be fed

    async def main():
        return await texts(await front.add("alive", "abc", SamplingParams()))

    assert asyncio.run(main())[-1] == "abc"
    for _ in range(200):
        if "orphan" in engine.aborted:
            break
        time.sleep(0.01)
    assert engine.aborted == ["orphan"] and not engine.has_unfinished_requests()
    assert {o.request_id: o.outputs[0].finish_reason for o in finished} == {"orphan": "abort", "alive": "length"}
