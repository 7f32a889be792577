"""Which media URLs the server may fetch: a server that fetches any URL a client names is a way into every network
it reaches (cloud metadata services, the Redis broker, other instances), so by default it fetches only from global
addresses.

The check is on the addresses the connection then uses: a host is resolved once, every address it resolves to is
checked, and the download connects to a checked address (never resolving the name again), so a DNS answer that
changes between the check and the connection (rebinding) changes nothing. Each redirect hop is checked the same way.
Flags as vLLM's server names them: ``--allowed-media-domains``, ``--allowed-local-media-path``; and
``--allow-private-media`` to reach loopback and private addresses.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Kinds of address --allow-private-media opens. The others are never an image host: link-local holds the cloud
# metadata services, and a connection to 0.0.0.0 or :: reaches this machine.
_PRIVATE_KINDS = ("loopback", "private", "non-global")
_PRIVATE_HINT = "media from private addresses is refused (see --allow-private-media)"
_NEVER_HINT = "media is never fetched from link-local, multicast, reserved or unspecified addresses"


class MediaRefused(ValueError):
    """A URL the policy refuses: the client's, answered with 400."""


def address_kind(address: IPAddress) -> str | None:
    """What makes ``address`` other than a global unicast address ("loopback", "private", ...), or None. An IPv6
    address that carries an IPv4 one (IPv4-mapped ``::ffff:127.0.0.1``, 6to4 ``2002:7f00:1::``) is judged by it."""
    if isinstance(address, ipaddress.IPv6Address):
        address = address.ipv4_mapped or address.sixtofour or address
    # Order matters: ipaddress counts 127.0.0.1 and 169.254.0.0/16 as private too, and ::1 as reserved.
    for kind in ("loopback", "unspecified", "link_local", "multicast", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "non-global"  # e.g. 100.64.0.0/10, carrier-grade NAT


@dataclass(frozen=True)
class MediaPolicy:
    """``allowed_domains``: the only host names fetched from (None: any); ``allow_private``: loopback and private
    addresses too; ``local_media_path``: the directory (a real path) whose files ``file://`` URLs may name (None:
    no file is read); ``max_redirects``: redirect hops followed."""

    allowed_domains: frozenset[str] | None = None
    allow_private: bool = False
    local_media_path: Path | None = None
    max_redirects: int = 5

    @classmethod
    def from_flags(cls, allowed_domains: Iterable[str] | None = None, allow_private: bool = False,
                   local_media_path: str | os.PathLike | None = None) -> MediaPolicy:
        """The policy of the server's flags; raises ValueError for a local media path that is not a directory."""
        domains = None if allowed_domains is None else frozenset(_normal_host(d) for d in allowed_domains)
        directory = None
        if local_media_path is not None:
            directory = Path(os.path.realpath(local_media_path))
            if not directory.is_dir():
                raise ValueError(f"--allowed-local-media-path {local_media_path} is not a directory")
        return cls(domains, allow_private, directory)

    async def addresses(self, host: str, port: int, subject: str) -> list[str]:
        """The addresses of ``host`` to connect to, every one checked; raises MediaRefused naming ``subject`` (e.g.
        "image URL host 127.0.0.1") and the rule it breaks. Host names outside ``allowed_domains`` are refused
        before any lookup."""
        host = _normal_host(host)
        if self.allowed_domains is not None and host not in self.allowed_domains:
            raise MediaRefused(f"{subject} is not in --allowed-media-domains")
        try:
            found = [ipaddress.ip_address(host)]
            literal = True
        except ValueError:
            found = await _resolve(host, port, subject)
            literal = False
        for address in found:
            kind = address_kind(address)
            if kind is None or (self.allow_private and kind in _PRIVATE_KINDS):
                continue
            article = "an" if kind[0] in "aeiou" else "a"
            what = f"is {article} {kind} address" if literal else f"resolves to {address}, {article} {kind} address"
            raise MediaRefused(f"{subject} {what}; {_PRIVATE_HINT if kind in _PRIVATE_KINDS else _NEVER_HINT}")
        return [str(address) for address in found]

    def local_file(self, url: str) -> Path:
        """The file a ``file://`` URL names, inside ``local_media_path`` once symlinks and ``..`` are resolved;
        raises MediaRefused otherwise."""
        if self.local_media_path is None:
            raise MediaRefused("file:// image URLs are refused: the server names no directory for them "
                               "(see --allowed-local-media-path)")
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise MediaRefused(f"image URL {url} names host {parts.netloc!r}: a file:// URL names a local file")
        path = Path(os.path.realpath(unquote(parts.path)))
        if not path.is_relative_to(self.local_media_path):
            raise MediaRefused(f"image URL {url} is outside the directory of --allowed-local-media-path")
        return path


def add_media_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("media fetching", "which image URLs the server fetches (default: http(s) "
                                                        "URLs of hosts with global addresses only)")
    group.add_argument("--allowed-media-domains", nargs="+", metavar="HOST",
                       help="fetch media only from these host names")
    group.add_argument("--allow-private-media", action="store_true",
                       help="fetch media from loopback and private addresses too")
    group.add_argument("--allowed-local-media-path", metavar="DIR",
                       help="serve file:// image URLs of files under DIR (symlinks and '..' resolved first)")


def media_policy(args: argparse.Namespace) -> MediaPolicy:
    """The policy of the flags ``add_media_flags`` adds; exits naming a bad one."""
    try:
        return MediaPolicy.from_flags(args.allowed_media_domains, args.allow_private_media,
                                      args.allowed_local_media_path)
    except ValueError as error:
        raise SystemExit(str(error)) from None


def _normal_host(host: str) -> str:
    return host.lower().rstrip(".")


async def _resolve(host: str, port: int, subject: str) -> list[IPAddress]:
    # The system resolver in a thread, under any event loop (uvloop's getaddrinfo is its own).
    try:
        infos = await asyncio.to_thread(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ValueError(f"{subject} does not resolve: {error}") from None
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
