"""The broker: a Redis server carrying the four channels of encoder disaggregation, through redis-py.

The first four channels are the seed's (``seeds/separated-encoder-epd.md``):

===  ==============  =========  ==============================================
 0   ``allocated``   P -> E     the prefill-decode instance reserved the request's cross blocks
 1   ``injected``    P -> E     the encoder states are in those blocks (or were refused: ``error``)
 2   ``metadata``    E -> P     request id, encoder length, shape and dtype of the states to come
 3   ``states``      E -> P     the encoder states, bfloat16, with their shape and dtype
 4   ``withdrawn``   E -> P     an announced request ended on the encode instance (aborted, failed), or, with no
                                request id, the encode instance is stopping: what it has not sent will not come
===  ==============  =========  ==============================================

Each is a Redis list per receiving instance and model (``tt-models:<instance>:<model>:<channel>``): a sender
RPUSHes, the receiver's connector thread BLPOPs, so a message waits in Redis until its receiver takes it and no
receiver sees another's. Notices and metadata are JSON; a states message is a JSON header, a newline, and the
raw bfloat16 bytes (``numel * 2`` of them), which the receiver checks against the header and the metadata.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

from tt_models.disagg.broker_connection import BrokerTLS, connect, masked_url

CHANNELS = ("allocated", "injected", "metadata", "states", "withdrawn")
WIRE_DTYPE = "bfloat16"  # what the states travel as: the device's activation dtype, half of float32's bytes


@dataclass(frozen=True)
class Metadata:
    """What an encode instance announces before sending a request's encoder states."""

    request_id: str
    sender: str  # the encode instance's name: where the notices go
    encoder_len: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return 2 * _numel(self.shape)


@dataclass(frozen=True)
class Notice:
    """An allocation or injection notice; ``error`` says why the prefill-decode instance refused the request."""

    request_id: str
    error: str | None = None


@dataclass(frozen=True)
class Withdrawal:
    """An encode instance's word that the encoder output of ``request_id`` will not come (or is no longer wanted),
    or, with no request id, that none it has not sent yet will: it is stopping."""

    sender: str
    request_id: str | None
    reason: str


@dataclass(frozen=True)
class States:
    request_id: str
    tensor: torch.Tensor  # bfloat16 [encoder_len, dim]


class PayloadError(ValueError):
    """A message that is not what its header (or the request's metadata) says; ``request_id`` when known."""

    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def encode_states(request_id: str, tensor: torch.Tensor) -> bytes:
    data = tensor.detach().to(torch.bfloat16).contiguous()
    header = {"request_id": request_id, "shape": list(data.shape), "dtype": WIRE_DTYPE}
    return json.dumps(header).encode() + b"\n" + data.view(torch.int16).numpy().tobytes()


def decode_states(payload: bytes) -> States:
    """The tensor of a states message; raises PayloadError when its bytes do not match its header."""
    header_end = payload.find(b"\n")
    if header_end < 0:
        raise PayloadError("a states message without a header")
    try:
        header = json.loads(payload[:header_end])
        request_id, shape, dtype = header["request_id"], tuple(int(d) for d in header["shape"]), header["dtype"]
    except (ValueError, KeyError, TypeError) as error:
        raise PayloadError(f"a states message with a malformed header: {error}") from error
    data = payload[header_end + 1:]
    if dtype != WIRE_DTYPE:
        raise PayloadError(f"states of request {request_id!r} are {dtype}; the wire dtype is {WIRE_DTYPE}", request_id)
    if len(data) != 2 * _numel(shape):
        raise PayloadError(f"states of request {request_id!r}: {len(data)} bytes for shape {list(shape)} in "
                           f"{WIRE_DTYPE} ({2 * _numel(shape)} expected)", request_id)
    values = torch.frombuffer(bytearray(data), dtype=torch.int16).view(torch.bfloat16).reshape(shape)
    return States(request_id, values)


class Broker:
    """One instance's view of the broker: sends to other instances' channels, receives from its own.

    ``password``: the broker's, when not in ``url``. ``transfers`` and ``transfer_bytes`` count messages and payload
    bytes by ``(channel, "sent" | "received")``. redis-py reconnects by itself after the server restarts; messages in
    flight then are lost (the requests they belong to fail by timeout on both sides).
    """

    def __init__(self, url: str, instance: str, model: str, tls: BrokerTLS = BrokerTLS(),
                 password: str | None = None) -> None:
        self.url = masked_url(url)  # what logs show: never the password
        self.instance = instance
        self.model = model
        self.client = connect(url, tls, password, socket_connect_timeout=2, health_check_interval=5)
        self.transfers: Counter[tuple[str, str]] = Counter()
        self.transfer_bytes: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def key(self, instance: str, channel: str) -> str:
        return f"tt-models:{instance}:{self.model}:{channel}"

    def inbox(self, channels: tuple[str, ...]) -> list[str]:
        return [self.key(self.instance, channel) for channel in channels]

    # Sending.

    def send_metadata(self, target: str, metadata: Metadata) -> None:
        body = {"request_id": metadata.request_id, "sender": metadata.sender, "encoder_len": metadata.encoder_len,
                "shape": list(metadata.shape), "dtype": metadata.dtype}
        self._send(target, "metadata", json.dumps(body).encode())

    def send_notice(self, target: str, channel: str, notice: Notice) -> None:
        self._send(target, channel, json.dumps({"request_id": notice.request_id, "error": notice.error}).encode())

    def send_withdrawal(self, target: str, withdrawal: Withdrawal) -> None:
        body = {"sender": withdrawal.sender, "request_id": withdrawal.request_id, "reason": withdrawal.reason}
        self._send(target, "withdrawn", json.dumps(body).encode())

    def send_states(self, target: str, request_id: str, tensor: torch.Tensor) -> None:
        self._send(target, "states", encode_states(request_id, tensor))

    def _send(self, target: str, channel: str, payload: bytes) -> None:
        self.client.rpush(self.key(target, channel), payload)
        self._count(channel, "sent", len(payload))

    # Receiving.

    def receive(self, channels: tuple[str, ...], timeout: float) -> tuple[str, bytes] | None:
        """The next message on one of this instance's ``channels``, waiting up to ``timeout`` seconds."""
        item = self.client.blpop(self.inbox(channels), timeout=timeout)
        if item is None:
            return None
        key, payload = item
        channel = key.decode().rsplit(":", 1)[1]
        self._count(channel, "received", len(payload))
        return channel, payload

    def _count(self, channel: str, direction: str, nbytes: int) -> None:
        with self._lock:
            self.transfers[channel, direction] += 1
            self.transfer_bytes[channel, direction] += nbytes


def parse_message(channel: str, payload: bytes) -> Any:
    """A received message as :class:`Metadata`, :class:`Notice`, :class:`States` or :class:`Withdrawal` (raises
    PayloadError)."""
    if channel == "states":
        return decode_states(payload)
    try:
        body = json.loads(payload)
        if channel == "metadata":
            return Metadata(body["request_id"], body["sender"], int(body["encoder_len"]), tuple(body["shape"]),
                            body["dtype"])
        if channel == "withdrawn":
            return Withdrawal(body["sender"], body["request_id"], body["reason"])
        return Notice(body["request_id"], body.get("error"))
    except (ValueError, KeyError, TypeError) as error:
        raise PayloadError(f"a malformed {channel} message: {error}") from error
