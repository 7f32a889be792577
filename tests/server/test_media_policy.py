"""The media fetching policy (``tt_models.server.media_policy``) through the image server's chat route: image URLs of
loopback hosts (by address, by IPv4-mapped address, by a name resolving to one, or behind a redirect) are a 400
naming the policy, and listeners that count connections show the target was never reached; private, link-local and
reserved addresses are refused before any socket connects; with the flags the local image host is reachable again.

No packet leaves 127.0.0.0/8 (and ::1): host names resolve through a stub, and a connection anywhere else fails
the test.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.server.image_cases import MLLAMA, PNG, SHORT_MAX_TOKENS, image_chat, image_part
from tests.server.test_image_errors import assert_refused, chat
from tt_models.server.cli import _parser
from tt_models.server.images import fetch
from tt_models.server.media_policy import MediaPolicy, media_policy

pytestmark = pytest.mark.slow

PUBLIC = "8.8.8.8"  # only ever handed to the connection guard
NAMES = {"evil.test": ["127.0.0.1"], "private.test": ["10.0.0.1"], "metadata.test": ["169.254.169.254"],
         "home.test": ["192.168.1.1"], "ula.test": ["fd00::1"], "mixed.test": [PUBLIC, "10.0.0.1"]}
PRIVATE_HINT = "media from private addresses is refused (see --allow-private-media)"
NEVER_HINT = "media is never fetched from link-local, multicast, reserved or unspecified addresses"


class Listener:
    """A TCP listener on a loopback address that counts the connections it accepts and answers each with ``reply``
    (none: it closes them)."""

    def __init__(self, host: str = "127.0.0.1", reply: bytes = b"") -> None:
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.bind((host, 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted += 1
            with connection:
                if self.reply:
                    connection.recv(65536)
                    connection.sendall(self.reply)

    def received(self) -> int:
        """The connections made so far: connections are accepted in order, so once one of our own is, every
        earlier one was."""
        before = self.accepted
        with socket.create_connection(self.sock.getsockname()[:2]):
            while self.accepted == before:
                time.sleep(0.01)
        return self.accepted - 1

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.sock.close()


def redirect(location: str) -> bytes:
    return f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()


class Guard:
    """Every connect and host name lookup of the process, recorded; a connect to an address outside the loopback
    range raises ``error``."""

    def __init__(self) -> None:
        self.attempts: list[tuple] = []
        self.lookups: list[str] = []
        self.error: type[Exception] = AssertionError

    def outside_loopback(self) -> list[tuple]:
        return [a for a in self.attempts if not ipaddress.ip_address(a[0]).is_loopback]

    def to_port(self, port: int) -> list[tuple]:
        return [a for a in self.attempts if a[1] == port]


@pytest.fixture(autouse=True)
def guard(monkeypatch) -> Iterator[Guard]:
    """Connections outside the loopback range fail, and host names resolve through ``NAMES`` only."""
    guard, real_connect, real_getaddrinfo = Guard(), socket.socket.connect, socket.getaddrinfo

    def connect(sock: socket.socket, address) -> None:
        guard.attempts.append(address)
        if isinstance(address, tuple) and not ipaddress.ip_address(address[0]).is_loopback:  # (not a Unix socket)
            raise guard.error(f"a socket was connected to {address}")
        real_connect(sock, address)

    def getaddrinfo(host, port, *args, **kwargs):
        if host in NAMES:
            guard.lookups.append(host)
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                     (a, port, 0, 0) if ":" in a else (a, port)) for a in NAMES[host]]
        socket.inet_pton(socket.AF_INET6, host) if ":" in host else socket.inet_aton(host)  # an address: no lookup
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield guard


@pytest.fixture
def use_policy(mllama_server):
    """Serve the image model under a policy of the test's (the server runs in this process), until the test ends."""
    state = mllama_server.app.state
    before = state.media_policy
    yield lambda **policy: setattr(state, "media_policy", MediaPolicy(**policy))
    state.media_policy = before


def assert_good_answer(client, url: str, image_references) -> None:
    reply = client.chat.completions.create(model=MLLAMA, messages=image_chat(url), max_tokens=SHORT_MAX_TOKENS,
                                           temperature=0)
    assert reply.choices[0].message.content == image_references.short.outputs[0].text


def ipv6_loopback() -> bool:
    try:
        Listener("::1").close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "evil.test", "2130706433"])
def test_loopback_hosts_are_refused_and_never_reached(host, guard, use_policy, mllama_http):
    use_policy()
    listener = Listener("::1" if host == "[::1]" and ipv6_loopback() else "127.0.0.1")
    try:
        url = f"http://{host}:{listener.port}/image.png"
        subject = f"image URL host {host.strip('[]')}"
        resolved = host in ("evil.test", "2130706433")  # a name, and 127.0.0.1 as one number: resolved, not parsed
        words = f"{subject} resolves to 127.0.0.1, a" if resolved else f"{subject} is a"
        assert_refused(mllama_http, chat(image_part(url)), f"{words} loopback address; {PRIVATE_HINT}")
        assert listener.received() == 0
        assert [a[0] for a in guard.to_port(listener.port)] == [listener.sock.getsockname()[0]]  # received()'s
        assert guard.lookups == (["evil.test"] * 2 if host == "evil.test" else [])  # the stub answered, not DNS
    finally:
        listener.close()


@pytest.mark.parametrize("case", ["domain-list", "unspecified-address"])
def test_a_redirect_hop_is_checked_as_the_first(case, guard, use_policy, mllama_http):
    """The first hop is allowed; its redirect to another port of 127.0.0.1 is refused: by name (evil.test resolves
    to 127.0.0.1, outside the domain list), or by address (0.0.0.0 reaches this machine's listeners)."""
    target = Listener()
    location, words = {"domain-list": (f"http://evil.test:{target.port}/image.png",
                                       "whose host evil.test is not in --allowed-media-domains"),
                       "unspecified-address": (f"http://0.0.0.0:{target.port}/image.png",
                                               f"whose host 0.0.0.0 is an unspecified address; {NEVER_HINT}")}[case]
    use_policy(allow_private=True, allowed_domains=frozenset({"127.0.0.1"}) if case == "domain-list" else None)
    redirector = Listener(reply=redirect(location))
    try:
        url = f"http://127.0.0.1:{redirector.port}/image.png"
        assert_refused(mllama_http, chat(image_part(url)), f"image URL {url} redirects to {location}, {words}")
        assert redirector.received() == 2 and target.received() == 0  # one request streamed, one not
    finally:
        target.close()
        redirector.close()


def test_redirects_are_followed_five_times_at_most(use_policy, mllama_http):
    use_policy(allow_private=True)
    loop = Listener()
    loop.reply = redirect(f"http://127.0.0.1:{loop.port}/again")
    try:
        url = f"http://127.0.0.1:{loop.port}/image.png"
        assert_refused(mllama_http, chat(image_part(url)), f"image URL {url} redirects more than 5 times")
        assert loop.received() == 2 * 6
    finally:
        loop.close()


REFUSED = [  # (host, why)
    ("10.0.0.1", f"is a private address; {PRIVATE_HINT}"),
    ("192.168.1.1", f"is a private address; {PRIVATE_HINT}"),
    ("[fd00::1]", f"is a private address; {PRIVATE_HINT}"),
    ("169.254.169.254", f"is a link-local address; {NEVER_HINT}"),
    ("224.0.0.1", f"is a multicast address; {NEVER_HINT}"),
    ("240.0.0.1", f"is a reserved address; {NEVER_HINT}"),
    ("100.64.0.1", f"is a non-global address; {PRIVATE_HINT}"),  # carrier-grade NAT (100.64.0.0/10)
    ("[2002:7f00:1::]", f"is a loopback address; {PRIVATE_HINT}"),  # 6to4: judged by the IPv4 it carries, 127.0.0.1
    ("[2002:a00:1::]", f"is a private address; {PRIVATE_HINT}"),  # and 10.0.0.1
    ("private.test", f"resolves to 10.0.0.1, a private address; {PRIVATE_HINT}"),
    ("home.test", f"resolves to 192.168.1.1, a private address; {PRIVATE_HINT}"),
    ("ula.test", f"resolves to fd00::1, a private address; {PRIVATE_HINT}"),
    ("mixed.test", f"resolves to 10.0.0.1, a private address; {PRIVATE_HINT}"),  # every address is checked
    ("metadata.test", f"resolves to 169.254.169.254, a link-local address; {NEVER_HINT}"),
]


# --allow-private-media opens the private ones: those are refused without it only.
@pytest.mark.parametrize("host,words,allow_private", [(*case, False) for case in REFUSED] +
                         [(*case, True) for case in REFUSED if NEVER_HINT in case[1]])
def test_other_addresses_are_refused_before_any_connection(host, words, allow_private, guard, use_policy,
                                                           mllama_http):
    use_policy(allow_private=allow_private)
    assert_refused(mllama_http, chat(image_part(f"http://{host}/image.png")),
                   f"image URL host {host.strip('[]')} {words}")
    assert guard.outside_loopback() == []


def test_the_domain_list_is_checked_before_any_lookup(guard, use_policy, mllama_http):
    use_policy(allow_private=True, allowed_domains=frozenset({"images.test"}))
    assert_refused(mllama_http, chat(image_part("http://evil.test/image.png")),
                   "image URL host evil.test is not in --allowed-media-domains")
    assert guard.lookups == [] and guard.outside_loopback() == []


def test_the_connection_goes_to_the_address_checked(guard, monkeypatch):
    """A name is resolved once: a second answer (DNS rebinding to 127.0.0.1) is never asked for, and the connection
    goes to the address that was checked."""
    answers = iter([[PUBLIC], ["127.0.0.1"]])
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host == "rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in next(answers)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    guard.error = ConnectionRefusedError  # as if the public host were down: nothing is sent to it
    with pytest.raises(ValueError, match="Could not fetch the image at http://rebind.test:8080/image.png"):
        asyncio.run(fetch("http://rebind.test:8080/image.png", MediaPolicy()))
    assert guard.attempts == [(PUBLIC, 8080)] and next(answers) == ["127.0.0.1"]


def test_with_the_flags_the_local_image_host_is_reachable(guard, use_policy, mllama_client, image_host,
                                                          image_references):
    url = f"{image_host.url}/image.png"
    for policy in (dict(allow_private=True), dict(allow_private=True, allowed_domains=frozenset({"127.0.0.1"}))):
        use_policy(**policy)
        assert_good_answer(mllama_client, url, image_references)
    assert guard.to_port(image_host.httpd.server_address[1])  # the guard sees the server's connections
    redirector = Listener(reply=redirect(url))
    try:
        assert_good_answer(mllama_client, f"http://127.0.0.1:{redirector.port}/image.png", image_references)
    finally:
        redirector.close()


def test_file_urls_only_under_the_allowed_directory(tmp_path, use_policy, mllama_http, mllama_client,
                                                    image_references):
    allowed = tmp_path / "media"
    allowed.mkdir()
    (allowed / "image.png").write_bytes(PNG)
    (tmp_path / "secret.png").write_bytes(PNG)
    os.symlink(tmp_path / "secret.png", allowed / "link.png")
    use_policy()
    assert_refused(mllama_http, chat(image_part(f"file://{allowed}/image.png")), "(see --allowed-local-media-path)")
    use_policy(local_media_path=allowed)
    assert_good_answer(mllama_client, f"file://{allowed}/image.png", image_references)
    for url in (f"file://{allowed}/../secret.png", f"file://{allowed}/link.png"):
        assert_refused(mllama_http, chat(image_part(url)), f"image URL {url} is outside the directory")
    assert_refused(mllama_http, chat(image_part(f"file://server{allowed}/image.png")), "names host 'server'")


def test_the_flags_make_the_policy(tmp_path):
    def policy(*flags: str) -> MediaPolicy:
        return media_policy(_parser().parse_args(["serve", "model", *flags]))

    assert policy() == MediaPolicy()
    assert policy("--allowed-media-domains", "Images.test.", "cdn.test", "--allow-private-media",
                  "--allowed-local-media-path", str(tmp_path / ".")) == \
        MediaPolicy(frozenset({"images.test", "cdn.test"}), True, tmp_path.resolve())
    with pytest.raises(SystemExit, match="is not a directory"):
        policy("--allowed-local-media-path", str(tmp_path / "missing"))
