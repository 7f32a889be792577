"""SIGTERM to a real ``tt-models serve`` during 32 streamed requests: readiness and new requests answer 503 at once,
the requests that can finish within ``--shutdown-timeout`` do, the rest end with an error event, none hangs, and the
process exits 0 within the timeout with no KV block in use."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.stopping import sigterm_refuses_new_work
from tt_models.server.shutdown import ABORT_GRACE_S
from tt_models.testing.server_process import free_port, wait_healthy
from tt_models.testing.streams import CompletionStream

pytestmark = [pytest.mark.slow, pytest.mark.alone]

ROOT = Path(__file__).resolve().parents[2]
NAME = "bart-stop"
TIMEOUT = 4.0  # --shutdown-timeout
SHORT, LONG = 48, 1000  # tokens: a fraction of a second for 32 sequences of the tiny BART, and far more than TIMEOUT


def test_sigterm_finishes_what_it_can_and_fails_the_rest(bart_dir, tmp_path):
    port, log = free_port(), tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tt_models.server.cli", "serve", str(bart_dir), "--served-model-name", NAME,
               "--max-num-seqs", "32", "--max-model-len", "1024", "--backend", "host", "--optimizations", "accuracy",
               "--port", str(port), "--shutdown-timeout", str(TIMEOUT)]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_healthy(url, process, log, seconds=180)
        streams = [CompletionStream(url, {"model": NAME, "prompt": "Hello world", "temperature": 0, "ignore_eos": True,
                                     "max_tokens": SHORT if i % 2 else LONG}, 60) for i in range(32)]
        for stream in streams:
            stream.start()
        for stream in streams:
            assert stream.started.wait(60), "a stream sent nothing"
        signalled = sigterm_refuses_new_work(process, url, NAME)

        for stream in streams:
            stream.join(TIMEOUT + ABORT_GRACE_S + 10)
            assert not stream.is_alive(), "a stream hangs"
        outcomes = [(stream.max_tokens, stream.outcome) for stream in streams]
        assert sorted(set(outcomes)) == [(SHORT, "completed"), (LONG, "server_shutting_down")], outcomes
        assert process.wait(TIMEOUT + ABORT_GRACE_S + 10) == 0
        assert time.monotonic() - signalled < TIMEOUT + ABORT_GRACE_S
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert f"{NAME} stopped with 0 KV blocks in use" in text and "Traceback" not in text, text
    assert "refused POST /v1/completions from 127.0.0.1:" in text and "refused GET /health from" in text, text
