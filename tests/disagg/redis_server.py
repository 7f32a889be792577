"""A real Redis server for the tests: ``redis-server`` (Debian's package, installed by scripts/setup.sh) on a free
loopback port, nothing persisted, stopped (and restartable) by the test. Optionally with a password for the default
user (``requirepass``), ACL users, and TLS only (``rediss://``)."""

from __future__ import annotations

import shutil
import subprocess
import time

import redis

from tests.certs import Certificate
from tt_models.testing.server_process import free_port

# What a broker's ACL user needs: its instances' lists, the two commands that move messages, PING for the check.
BROKER_ACL = ("~tt-models:*", "resetchannels", "-@all", "+rpush", "+blpop", "+ping")


class RedisServer:
    """``password``: the default user's (``url`` carries it); ``users``: ACL users, ``{name: password}``, each with
    :data:`BROKER_ACL`; ``tls``: the server's certificate, served on a TLS port only."""

    def __init__(self, *, password: str | None = None, users: dict[str, str] | None = None,
                 tls: Certificate | None = None) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: run scripts/setup.sh (Debian package redis-server)"
        self.binary = binary
        self.port = free_port()
        self.password, self.users, self.tls = password, dict(users or {}), tls
        scheme, secret = ("rediss" if tls else "redis"), (f":{password}@" if password else "")
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"{scheme}://{secret}{self.address}"
        self.process: subprocess.Popen | None = None

    def user_url(self, user: str, password: str) -> str:
        return f"{'rediss' if self.tls else 'redis'}://{user}:{password}@{self.address}"

    def _options(self) -> list[str]:
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        if self.tls:
            options += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.certfile),
                        "--tls-key-file", str(self.tls.keyfile), "--tls-auth-clients", "no"]
        else:
            options += ["--port", str(self.port)]
        if self.password:
            options += ["--requirepass", self.password]
        for name, password in self.users.items():
            options += ["--user", name, "on", f">{password}", *BROKER_ACL]
        return options

    def start(self) -> RedisServer:
        self.process = subprocess.Popen([self.binary, *self._options()], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        client = self.client()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                assert time.monotonic() < deadline and self.process.poll() is None, "redis-server did not start"
                time.sleep(0.05)

    def client(self, **kwargs: object) -> redis.Redis:
        """A client of the default user (an administrator)."""
        tls = {"ssl_ca_certs": str(self.tls.certfile)} if self.tls else {}
        return redis.Redis.from_url(self.url, **tls, **kwargs)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
