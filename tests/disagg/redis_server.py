"""A real Redis server for the tests: ``redis-server`` (Debian's package, installed by scripts/setup.sh) on a free
loopback port, nothing persisted, stopped (and restartable) by the test."""

from __future__ import annotations

import shutil
import subprocess
import time

import redis

from tests.server.process import free_port


class RedisServer:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: run scripts/setup.sh (Debian package redis-server)"
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                assert time.monotonic() < deadline and self.process.poll() is None, "redis-server did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
