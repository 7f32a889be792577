"""What every graceful stop must show at once, for the tests that stop a real server or proxy under load."""

from __future__ import annotations

import signal
import subprocess
import time

import httpx


def sigterm_refuses_new_work(process: subprocess.Popen, url: str, model: str) -> float:
    """SIGTERM to ``process``: within 2 s readiness answers 503, and so does a new completion, with the
    ``server_shutting_down`` code. Returns when the signal was sent (``time.monotonic()``)."""
    process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    while httpx.get(f"{url}/health", timeout=5).status_code != 503:
        assert time.monotonic() < signalled + 2, "readiness still 200 after SIGTERM"
        time.sleep(0.02)
    refused = httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": "Hi", "max_tokens": 1}, timeout=5)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "server_shutting_down"
    return signalled
