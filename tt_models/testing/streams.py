"""A streamed completion read to its end on a thread of its own, for tests that stop a server or proxy while
streams run."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx


class CompletionStream(threading.Thread):
    """``POST {url}/v1/completions`` with ``body`` (streamed), read to its end: ``outcome`` "completed" (every choice
    finished, then [DONE]), "ended unfinished", "no [DONE]", or the error event's code; ``started`` is set at the
    first event."""

    def __init__(self, url: str, body: dict[str, Any], timeout: float) -> None:
        super().__init__(daemon=True)
        self.url, self.body, self.timeout = url, {**body, "stream": True}, timeout
        self.max_tokens: int = body["max_tokens"]
        self.started = threading.Event()
        self.outcome: str | None = None

    def run(self) -> None:
        finished, error = False, None
        with httpx.stream("POST", f"{self.url}/v1/completions", json=self.body, timeout=self.timeout) as response:
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    self.outcome = error or ("completed" if finished else "ended unfinished")
                    return
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    self.started.set()
                    if "error" in event:
                        error = event["error"]["code"]
                    else:
                        finished = finished or event["choices"][0]["finish_reason"] == "length"
        self.outcome = "no [DONE]"
