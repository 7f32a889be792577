"""A server in a process of its own (``tt-models serve``, ``tt-models proxy``, vLLM's server): a free loopback port
to start it on, and the wait until it serves. Light to import: the benchmarks (bench/) use it too."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, log: Path | None = None, seconds: float = 300,
                 verify: ssl.SSLContext | bool = True) -> None:
    """Return once ``url``'s ``/health`` answers 200 (``verify``: a context trusting an https server's CA).
    Raises RuntimeError, with the end of ``log`` (the process's output), if ``process`` exits first or ``seconds``
    pass."""
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with code {process.returncode}{_tail(log)}")
        try:
            if httpx.get(f"{url}/health", timeout=2, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:  # not listening yet
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server for {url} did not start within {seconds:.0f} s{_tail(log)}")
        time.sleep(0.5)


def stop(process: subprocess.Popen, seconds: float) -> None:
    """SIGTERM (a graceful stop), and SIGKILL if ``process`` has not exited within ``seconds``."""
    process.terminate()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(log: Path | None) -> str:
    return f":\n{log.read_text(errors='replace')[-6000:]}" if log is not None else ""
