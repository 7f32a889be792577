"""A tiny HTTP server on 127.0.0.1 (stdlib, in a thread) for the server's image downloads: files by path, and
the misbehaviours the download limits exist for."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tt_models.server.images import MAX_IMAGE_BYTES

OVER_LIMIT = MAX_IMAGE_BYTES + 2**20
SLOW_S = 3.0  # how long /slow waits before answering


class ImageHost:
    """``files`` served by path; ``/big-declared`` declares a body over the limit (and sends none),
    ``/big-streamed`` sends one without declaring its length, ``/slow`` answers after ``SLOW_S``; else 404."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(files))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ImageHost:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(files: dict[str, bytes]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                self._answer()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: that is what the limits do

        def _answer(self) -> None:
            if self.path == "/slow":
                time.sleep(SLOW_S)
            if self.path in files or self.path == "/slow":
                body = files.get(self.path, b"late")
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif self.path == "/big-declared":
                self.send_response(200)
                self.send_header("Content-Length", str(OVER_LIMIT))
                self.end_headers()
            elif self.path == "/big-streamed":  # HTTP/1.0 without a length: the body ends when the connection does
                self.send_response(200)
                self.end_headers()
                chunk = bytes(2**20)
                for _ in range(OVER_LIMIT // len(chunk)):
                    self.wfile.write(chunk)
            else:
                self.send_error(404)

        def log_message(self, format: str, *args) -> None:
            pass

    return Handler
