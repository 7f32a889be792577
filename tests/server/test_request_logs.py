"""The server's log lines about a request name its id (``chatcmpl-<X-Request-Id>``, or the id the server gave it) and
never its prompt at info level; at debug the prompt is there, with the id."""

from __future__ import annotations

import logging
import time

from tests.server.cases import LLAMA

SECRET = "the walrus sings at midnight 7c41"  # the prompt, which must not reach info-level logs


def chat(http, request_id: str) -> None:
    body = {"model": LLAMA, "max_tokens": 2, "messages": [{"role": "user", "content": SECRET}]}
    reply = http.post("/v1/chat/completions", json=body, headers={"X-Request-Id": request_id})
    assert reply.status_code == 200 and reply.json()["id"] == f"chatcmpl-{request_id}", reply.text


def request_lines(caplog, request_id: str) -> list[str]:
    """The server's lines logged for the request (its access line comes once the answer is sent: waited for)."""
    deadline = time.monotonic() + 5
    while not any("POST /v1/chat/completions 200" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "no access log line"
        time.sleep(0.01)
    return [r.getMessage() for r in caplog.records if r.name.startswith("tt_models")]


def test_info_lines_name_the_request_and_not_its_prompt(http, caplog):
    caplog.set_level(logging.INFO)
    chat(http, "logs-info-1")
    lines = request_lines(caplog, "logs-info-1")
    assert len(lines) >= 3, lines  # received, finished, access
    assert all("logs-info-1" in line for line in lines), lines
    assert any(line.startswith("request chatcmpl-logs-info-1-0 finished (length)") for line in lines), lines
    assert SECRET not in caplog.text


def test_debug_lines_carry_the_prompt_with_the_request_id(http, caplog):
    caplog.set_level(logging.DEBUG)
    chat(http, "logs-debug-1")
    lines = request_lines(caplog, "logs-debug-1")
    assert any(SECRET in line and line.startswith("request chatcmpl-logs-debug-1-0: prompt") for line in lines), lines
