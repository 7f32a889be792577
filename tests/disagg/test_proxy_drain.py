"""SIGTERM to a real ``tt-models proxy`` during streamed requests, in front of fake instances that stream slowly (no
model): readiness and new requests answer 503 at once, the streams that end within ``--shutdown-timeout`` do, the
rest end with an error event and their upstream connections are closed, a request held by a hanging encode instance
gets 503, and the proxy exits 0 in time."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.disagg.fake_instance import MODEL, FakeInstance
from tests.stopping import sigterm_refuses_new_work
from tt_models.server.shutdown import ABORT_GRACE_S
from tt_models.testing.server_process import free_port, wait_healthy
from tt_models.testing.streams import CompletionStream

TIMEOUT = 1.5  # --shutdown-timeout
SHORT, LONG = 10, 1000  # tokens: half a second (TOKEN_S each), and far more than TIMEOUT
STREAMS = 8


@pytest.fixture
def instances():
    encode, decode = FakeInstance("encode").start(), FakeInstance("prefill_decode").start()
    yield encode, decode
    encode.stop()
    decode.stop()


def test_sigterm_drains_the_proxy(instances, tmp_path: Path):
    encode, decode = instances
    port, log = free_port(), tmp_path / "proxy.log"
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tt_models.server.cli", "proxy", "--encode", encode.url, "--prefill-decode",
               decode.url, "--port", str(port), "--shutdown-timeout", str(TIMEOUT)]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, process, log, seconds=60)
        streams = [CompletionStream(url, {"model": MODEL, "prompt": "Hi", "max_tokens": SHORT if i % 2 else LONG}, 30)
                   for i in range(STREAMS)]
        for stream in streams:
            stream.start()
        encoding: list[httpx.Response] = []
        hung = threading.Thread(target=lambda: encoding.append(httpx.post(
            f"{url}/v1/audio/transcriptions", content=b"audio", timeout=30)), daemon=True)
        hung.start()
        for stream in streams:
            assert stream.started.wait(10), "a stream sent nothing"
        signalled = sigterm_refuses_new_work(process, url, MODEL)

        for stream in streams:
            stream.join(TIMEOUT + ABORT_GRACE_S + 10)
            assert not stream.is_alive(), "a stream hangs"
        hung.join(TIMEOUT + ABORT_GRACE_S + 10)
        assert encoding and encoding[0].status_code == 503, encoding
        assert encoding[0].json()["error"]["code"] == "server_shutting_down"
        outcomes = sorted({(stream.max_tokens, stream.outcome) for stream in streams})
        assert outcomes == [(SHORT, "completed"), (LONG, "server_shutting_down")], outcomes
        assert process.wait(TIMEOUT + ABORT_GRACE_S + 10) == 0
        assert time.monotonic() - signalled < TIMEOUT + ABORT_GRACE_S
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 5
    while decode.left < STREAMS // 2:  # the instance sees each aborted stream's connection go: it would abort it
        assert time.monotonic() < deadline, f"{decode.left} upstream streams closed, {STREAMS // 2} expected"
        time.sleep(0.05)
    text = log.read_text()
    assert "Traceback" not in text, text
