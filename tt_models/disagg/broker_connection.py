"""Connecting to the broker: ``redis://[[user]:password@]host:port[/db]`` (``rediss://`` for TLS; the user is a Redis
ACL user, none the ``default`` one), the URL as logs and errors show it (the password masked: ``redis://user:***@
host:port``), the password from a file or the environment instead (a URL's shows in the process list), the TLS
files of ``rediss://``, and the check at startup that fails within seconds, never hangs."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

CHECK_TIMEOUT_S = 2.0  # for the connection and for the answer: a check takes at most twice this
PASSWORD_ENV = "TT_MODELS_BROKER_PASSWORD"


class BrokerUnavailable(RuntimeError):
    """The broker cannot be reached or refuses the credentials; the message names it, its password masked."""


@dataclass(frozen=True)
class BrokerTLS:
    """The files of a ``rediss://`` broker's TLS, as redis-py takes them (also possible as URL parameters:
    ``rediss://host:port?ssl_ca_certs=ca.pem``)."""

    ca_cert: str | None = None  # the CA that signed the server's certificate (default: the system's)
    certfile: str | None = None  # this instance's certificate, for a server with tls-auth-clients
    keyfile: str | None = None

    def kwargs(self) -> dict[str, str]:
        given = {"ssl_ca_certs": self.ca_cert, "ssl_certfile": self.certfile, "ssl_keyfile": self.keyfile}
        return {name: value for name, value in given.items() if value is not None}


def broker_password(path: str | None) -> str | None:
    """The broker's password from the file ``path`` (its content without the final line break), else from
    ``$TT_MODELS_BROKER_PASSWORD``; None when neither gives one (the URL may carry it). Raises BrokerUnavailable
    for a file that cannot be read or is empty."""
    if path is None:
        return os.environ.get(PASSWORD_ENV) or None
    try:
        with open(path, encoding="utf-8") as file:
            password = file.read().removesuffix("\n").removesuffix("\r")
    except (OSError, UnicodeDecodeError) as error:
        raise BrokerUnavailable(f"the broker password file {path} cannot be read: {error}") from None
    if not password:
        raise BrokerUnavailable(f"the broker password file {path} is empty")
    return password


def masked_url(url: str) -> str:
    """``url`` with its password, in the user part or a ``password=`` parameter, replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
    query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", parts.query)
    return parts._replace(netloc=netloc, query=query).geturl()


def scrubbed(text: str, url: str, password: str | None = None) -> str:
    """``text`` (an error's) with ``url`` masked and its password (or ``password``) nowhere, should a library have
    quoted either."""
    text = text.replace(url, masked_url(url))
    for secret in _passwords(url) | ({password} if password else set()):
        text = text.replace(secret, "***")
    return text


def _passwords(url: str) -> set[str]:
    parts = urlsplit(url)
    found = {parts.password, unquote(parts.password)} if parts.password else set()
    found.update(unquote(value) for value in re.findall(r"(?:^|&)password=([^&]*)", parts.query))
    return {secret for secret in found if secret}


def connect(url: str, tls: BrokerTLS = BrokerTLS(), password: str | None = None, **kwargs: object) -> redis.Redis:
    """A redis-py client of ``url`` (no command sent yet), authenticating with ``password`` (as the URL's user) if
    given; raises BrokerUnavailable for a URL it cannot use."""
    if tls.kwargs() and urlsplit(url).scheme != "rediss":
        raise BrokerUnavailable(f"the broker {masked_url(url)}: TLS files need a rediss:// URL")
    if password is not None and _passwords(url):  # redis-py would take the URL's silently
        raise BrokerUnavailable(f"the broker {masked_url(url)}: its URL has a password, and another one was given "
                                f"(--broker-password-file or ${PASSWORD_ENV}); give one")
    try:
        return redis.Redis.from_url(url, **tls.kwargs(), **({"password": password} if password else {}), **kwargs)
    except (ValueError, TypeError) as error:
        raise BrokerUnavailable(f"the broker URL {masked_url(url)} is not usable: "
                                f"{scrubbed(str(error), url, password)}") from None


def check(url: str, tls: BrokerTLS = BrokerTLS(), password: str | None = None) -> None:
    """Raise BrokerUnavailable unless the broker answers a PING with these credentials, within 2 x 2 s."""
    client = connect(url, tls, password, socket_connect_timeout=CHECK_TIMEOUT_S, socket_timeout=CHECK_TIMEOUT_S,
                     retry=Retry(NoBackoff(), 0))  # one attempt: a wrong password does not improve with retries
    try:
        client.ping()
    except redis.AuthenticationError as error:
        raise BrokerUnavailable(f"the broker {masked_url(url)} refused the credentials (a wrong or missing user or "
                                f"password): {scrubbed(str(error), url, password)}") from None
    except redis.RedisError as error:
        raise BrokerUnavailable(f"the broker {masked_url(url)} is unreachable or refused the check: "
                                f"{type(error).__name__}: {scrubbed(str(error), url, password)}") from None
    finally:
        client.close()
