"""The proxy's fault paths, in front of fake instances (no model, loopback only): its 504 after ``encode_timeout``,
its skip of an encode instance that refuses connections for ``_DOWN_SECONDS`` (and of one that hung, and of one that
is stopping), and turns between equally loaded instances. The proxy runs in this process, its clock (for the skip)
set by the test."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.server.cases import ServerThread
from tt_models.disagg import proxy as proxy_module
from tt_models.disagg.proxy import _DOWN_SECONDS, Proxy, create_proxy_app
from tt_models.testing.metrics import metric
from tt_models.testing.server_process import free_port

MODEL = "whisper"
ENCODE_TIMEOUT = 0.5  # seconds: the proxy's encode_timeout here
SLACK = 1.0  # seconds beyond a documented bound for loopback HTTP and thread scheduling on a loaded 2-core machine


class Upstream:
    """A fake ``tt-models serve`` instance on a fixed loopback port: discovery, /health, and a transcription route
    that answers its own name, or waits while ``hung`` (a process under SIGSTOP: connections accepted, no answer),
    or answers 503 ``server_shutting_down`` while ``stopping`` (a graceful stop). It records the request ids it gets.
    It can be stopped (the port then refuses connections) and started again on the same port."""

    def __init__(self, role: str, name: str) -> None:
        self.role, self.name, self.port = role, name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.arrived = 0  # transcription requests received
        self.ids: list[str] = []  # their X-Request-Id
        self.hung = self.stopping = False
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def app(self) -> FastAPI:
        app = FastAPI()
        app.get("/disagg/info")(lambda: {"role": self.role, "instance": self.name,
                                         "models": {MODEL: {"encoder": True}}})
        app.get("/health")(lambda: {})

        @app.post("/v1/audio/transcriptions")
        async def transcribe(request: Request) -> JSONResponse:
            self.arrived += 1
            self.ids.append(request.headers["x-request-id"])
            if self.stopping:
                return JSONResponse({"error": {"message": "The server is shutting down", "type": "server_error",
                                               "param": None, "code": "server_shutting_down"}}, status_code=503)
            while self.hung:
                await asyncio.sleep(0.01)
            return JSONResponse({"text": self.name})

        return app

    def start(self) -> Upstream:
        self.server = uvicorn.Server(uvicorn.Config(self.app(), host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, f"{self.name} did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.hung = False
        if self.server is not None:
            self.server.should_exit = True
            self.thread.join(10)
            self.server = None


@pytest.fixture
def clock(monkeypatch) -> SimpleNamespace:
    """The proxy's monotonic clock (down windows), frozen at ``now`` unless the test moves it."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(proxy_module, "time", SimpleNamespace(monotonic=lambda: clock.now))
    return clock


@pytest.fixture
def upstreams() -> Iterator[dict[str, Upstream]]:
    fakes = {name: Upstream("encode" if name.startswith("e") else "prefill_decode", name).start()
             for name in ("e1", "e2", "pd")}
    yield fakes
    for fake in fakes.values():
        fake.stop()


def serve_proxy(upstreams: dict[str, Upstream], encoders: list[str]) -> ServerThread:
    return ServerThread(create_proxy_app(Proxy([upstreams[e].url for e in encoders], [upstreams["pd"].url],
                                               encode_timeout=ENCODE_TIMEOUT, startup_timeout=10)))


def transcribe(url: str) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = httpx.post(f"{url}/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF", "audio/wav")},
                          data={"model": MODEL}, timeout=10)
    return response, time.monotonic() - start


def outstanding(url: str, upstreams: list[Upstream]) -> float:
    """The proxy's requests in flight on these instances (a missing gauge fails)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(metric(text, "tt_models_proxy:outstanding_requests", instance=u.url) for u in upstreams)


def test_an_encode_instance_that_does_not_answer_gets_504_after_the_timeout(upstreams):
    upstreams["e1"].hung = True
    with serve_proxy(upstreams, ["e1"]) as server:
        response, seconds = transcribe(server.url)
        assert response.status_code == 504 and response.json()["error"]["code"] == "encode_timeout", response.text
        assert ENCODE_TIMEOUT <= seconds < ENCODE_TIMEOUT + SLACK
        assert upstreams["e1"].arrived == 1 and upstreams["pd"].arrived == 0
        assert outstanding(server.url, [upstreams["e1"], upstreams["pd"]]) == 0


def test_a_refusing_encode_instance_is_skipped_for_its_down_window(upstreams, clock, caplog):
    e1, e2 = upstreams["e1"], upstreams["e2"]
    with serve_proxy(upstreams, ["e1", "e2"]) as server:
        e1.stop()  # refuses connections from now on
        results = [transcribe(server.url)[0] for _ in range(2)]
        assert [r.status_code for r in results] == [200, 200] and e2.arrived == 2
        refusals = [r for r in caplog.records if "refused the connection" in r.getMessage()]
        assert len(refusals) == 1, "e1 was not tried, or tried again within its window"
        e1.start()  # accepts again, but stays skipped until its window ends
        clock.now = _DOWN_SECONDS - 1e-3
        assert [transcribe(server.url)[0].status_code for _ in range(2)] == [200, 200]
        assert e1.arrived == 0 and e2.arrived == 4
        clock.now = _DOWN_SECONDS
        assert [transcribe(server.url)[0].status_code for _ in range(2)] == [200, 200]
        assert e1.arrived == 1 and e2.arrived == 5  # tried again: the two take turns
        assert outstanding(server.url, list(upstreams.values())) == 0


def test_a_hung_encode_instance_fails_its_request_and_is_skipped(upstreams, clock):
    """A hung instance (as under SIGSTOP: it accepts connections, never answers): its request gets 504 within
    ``encode_timeout``, requests meanwhile and after it go to the healthy instance without waiting."""
    e1, e2 = upstreams["e1"], upstreams["e2"]
    e1.hung = True
    with serve_proxy(upstreams, ["e1", "e2"]) as server, ThreadPoolExecutor(1) as pool:
        first = pool.submit(transcribe, server.url)
        deadline = time.monotonic() + SLACK
        while e1.arrived == 0:  # equally loaded: the first request goes to the first instance
            assert time.monotonic() < deadline and not first.done(), "e1 did not get the first request"
            time.sleep(0.01)
        meanwhile, seconds = transcribe(server.url)
        assert meanwhile.status_code == 200 and e2.arrived == 1 and seconds < ENCODE_TIMEOUT
        response, seconds = first.result()
        assert response.status_code == 504 and ENCODE_TIMEOUT <= seconds < ENCODE_TIMEOUT + SLACK
        clock.now = _DOWN_SECONDS - 1e-3
        after = [transcribe(server.url) for _ in range(2)]
        assert [r.status_code for r, _ in after] == [200, 200] and all(s < ENCODE_TIMEOUT for _, s in after)
        assert e1.arrived == 1 and e2.arrived == 3
        assert outstanding(server.url, list(upstreams.values())) == 0


def test_equally_loaded_encode_instances_take_turns(upstreams):
    with serve_proxy(upstreams, ["e1", "e2"]) as server:
        assert all(transcribe(server.url)[0].status_code == 200 for _ in range(4))
    assert upstreams["e1"].arrived == upstreams["e2"].arrived == 2 and upstreams["pd"].arrived == 4


def test_a_stopping_encode_instance_is_skipped_and_the_request_goes_on_under_a_new_id(upstreams, clock, caplog):
    e1, e2, pd = upstreams["e1"], upstreams["e2"], upstreams["pd"]
    e1.stopping = True
    with serve_proxy(upstreams, ["e1", "e2"]) as server:
        response, _ = transcribe(server.url)
        assert response.status_code == 200 and response.json()["text"] == "pd"
        assert e1.arrived == e2.arrived == 1 and e1.ids[0] != e2.ids[0] and pd.ids == e2.ids  # a new id, end to end
        assert [transcribe(server.url)[0].status_code for _ in range(2)] == [200, 200]
        assert e1.arrived == 1 and e2.arrived == 3  # skipped within its window
        logged = [r.getMessage() for r in caplog.records if "is stopping" in r.getMessage()]
        assert logged == [f"request {e1.ids[0]}: encode instance {e1.url} is stopping: skipped for {_DOWN_SECONDS} s; "
                          f"sent to another as request {e2.ids[0]}"]
        e2.stopping = True  # the last one: its refusal is the client's answer
        clock.now = _DOWN_SECONDS
        response, _ = transcribe(server.url)
        assert response.status_code == 503 and response.json()["error"]["code"] == "server_shutting_down"
        assert outstanding(server.url, list(upstreams.values())) == 0
