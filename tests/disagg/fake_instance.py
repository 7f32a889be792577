"""A stand-in for a ``tt-models serve`` instance behind the proxy, with no model: it answers the proxy's discovery
and ``/health``, streams completions slowly (one event per ``TOKEN_S``), counting the streams its client left
before their end, and takes ``HANG_S`` to answer a transcription (an encoder that hangs). It runs on a loopback port
in a thread of the test process."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tt_models.testing.server_process import free_port

MODEL = "fake"
TOKEN_S = 0.05
HANG_S = 60.0


class FakeInstance:
    def __init__(self, role: str) -> None:
        self.role = role
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.left = 0  # streams whose client (the proxy) closed the connection before their end
        routes = [Route("/disagg/info", self._info), Route("/health", lambda _: Response(status_code=200)),
                  Route("/v1/completions", self._completion, methods=["POST"]),
                  Route("/v1/audio/transcriptions", self._hang, methods=["POST"])]
        config = uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> FakeInstance:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the fake instance did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = self._server.force_exit = True  # the hanging transcription is not waited for
        self._thread.join(10)

    async def _info(self, _: Request) -> Response:
        return JSONResponse({"role": self.role, "instance": f"fake-{self.role}-{self.port}",
                             "models": {MODEL: {"encoder": False}}})

    async def _hang(self, _: Request) -> Response:
        await asyncio.sleep(HANG_S)
        return JSONResponse({"text": ""})

    async def _completion(self, request: Request) -> Response:
        tokens = (await request.json())["max_tokens"]

        async def events():
            done = False
            try:
                for i in range(tokens):
                    await asyncio.sleep(TOKEN_S)
                    finish = "length" if i == tokens - 1 else None
                    yield f"data: {json.dumps({'choices': [{'index': 0, 'text': 'x', 'finish_reason': finish}]})}\n\n"
                yield "data: [DONE]\n\n"
                done = True
            finally:
                self.left += not done

        return StreamingResponse(events(), media_type="text/event-stream")
