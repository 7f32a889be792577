"""The prefill-decode side of encoder disaggregation: encoder outputs in, cross blocks written, requests served.

For each request an encode instance announces (metadata), the inbox reserves the request's cross blocks in the
KV pool, first come first served and only when the pool has room for them plus one request's self blocks
(backpressure: the encode instance waits, nothing is dropped, and the requests already admitted can always
finish) and no request that runs its encoder here waits for that pool (it came first), then notifies the encode
instance. When the states arrive it checks them against the metadata, writes
their cross K/V into the reserved blocks with the generator's ``write_cross_kv`` and notifies again. The request
itself arrives afterwards (the proxy sends it once the encode instance is done) under the same id: the engine
claims its blocks and runs it with ``encoder_inputs[i] = None``.

An encode instance withdraws a request it ended (aborted, failed) and says when it stops: what it announced and
will not send is dropped at once, its blocks freed. A reservation whose states do not come within ``timeout``
seconds, and written blocks that no request claims within ``timeout``, are freed (the encode instance died, the
broker restarted, the proxy gave up). Everything runs on the engine thread (``poll``); the connector thread only
receives.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tt_models.disagg.broker import WIRE_DTYPE, Broker, Metadata, Notice, PayloadError, States, Withdrawal
from tt_models.disagg.connector import Connector
from tt_models.engine.kv_blocks import KVBlockManager

logger = logging.getLogger(__name__)


@dataclass
class _Reservation:
    metadata: Metadata
    replica: int  # whose pool holds the blocks: the request runs there
    deadline: float
    written: bool = False


@dataclass
class InboxStats:
    injected: int = 0
    refused: int = 0
    expired: int = 0
    withdrawn: int = 0  # dropped when their encode instance withdrew them or stopped
    claimed: int = 0
    waited: int = 0  # announcements that found the pool full and waited for room
    refusals: deque[str] = field(default_factory=lambda: deque(maxlen=16))  # the latest reasons, for logs and tests


class EncoderInbox:
    """``kvs``: the engine's pool per data-parallel replica (a reservation goes to the one with the most free
    blocks); ``writer(states, cross_blocks, encoder_len, replica)`` writes one request's cross K/V (the model
    runner's); ``queued(replica)``: whether requests that hold no blocks yet wait for that replica's pool (the
    scheduler's)."""

    def __init__(self, broker: Broker, kvs: list[KVBlockManager], writer: Any, queued: Callable[[int], bool], *,
                 max_encoder_len: int, dim: int, headroom_blocks: int, timeout: float = 30.0) -> None:
        self.broker = broker
        self.kvs = kvs
        self.writer = writer
        self.queued = queued
        self.max_encoder_len = max_encoder_len
        self.dim = dim
        self.headroom_blocks = headroom_blocks
        self.timeout = timeout
        # A withdrawal comes after the messages it is about: on its own list, it is taken after theirs (BLPOP takes
        # the first list that holds one).
        self.connector = Connector(broker, ("metadata", "states", "withdrawn"))
        self.pending: deque[Metadata] = deque()  # announced, waiting for room in the pool
        self.reserved: dict[str, _Reservation] = {}  # blocks reserved, states not written yet / not claimed yet
        self.stats = InboxStats()
        self._waiting_for_room: str | None = None  # the announcement at the head of ``pending``, once counted

    def start(self) -> None:
        self.connector.start()

    def stop(self) -> None:
        self.connector.stop()

    @property
    def num_awaiting_states(self) -> int:
        return sum(not r.written for r in self.reserved.values())

    @property
    def num_unclaimed(self) -> int:
        return sum(r.written for r in self.reserved.values())

    # The engine thread.

    def claim(self, request_id: str, encoder_len: int) -> int | None:
        """The replica whose cross blocks hold the request's encoder output already (its ``allocate`` there takes
        them), or None."""
        reservation = self.reserved.get(request_id)
        if reservation is None or not reservation.written or reservation.metadata.encoder_len != encoder_len:
            return None
        del self.reserved[request_id]
        self.stats.claimed += 1
        return reservation.replica

    def poll(self) -> None:
        now = time.monotonic()
        for channel, message in self.connector.messages():
            if isinstance(message, PayloadError):
                self._refuse(message.request_id, str(message))
            elif channel == "metadata":
                self._announce(message)
            elif channel == "withdrawn":
                self._withdrawn(message)
            else:
                self._inject(message)
        self._expire(now)
        self._reserve(now)

    def _announce(self, metadata: Metadata) -> None:
        problem = None
        if metadata.dtype != WIRE_DTYPE:
            problem = f"dtype {metadata.dtype}; the wire dtype is {WIRE_DTYPE}"
        elif metadata.shape != (metadata.encoder_len, self.dim):
            problem = f"shape {list(metadata.shape)} for encoder_len {metadata.encoder_len}; expected " \
                      f"[{metadata.encoder_len}, {self.dim}]"
        elif not 0 < metadata.encoder_len <= self.max_encoder_len:
            problem = f"encoder_len {metadata.encoder_len} outside 1..{self.max_encoder_len}"
        elif metadata.request_id in self.reserved or any(kv.has_cross(metadata.request_id) for kv in self.kvs):
            problem = "the request id is in use"
        if problem is not None:
            self._notify(metadata.sender, "allocated", metadata.request_id, f"refused metadata: {problem}")
            return
        self.pending.append(metadata)

    def _reserve(self, now: float) -> None:
        while self.pending:
            metadata = self.pending[0]
            replica = self._room_for(metadata.encoder_len)
            if replica is None:
                if self._waiting_for_room != metadata.request_id:
                    self._waiting_for_room = metadata.request_id
                    self.stats.waited += 1
                return  # FCFS: later announcements wait behind this one
            self.pending.popleft()
            self.kvs[replica].reserve_cross(metadata.request_id, metadata.encoder_len)
            self.reserved[metadata.request_id] = _Reservation(metadata, replica, now + self.timeout)
            self._notify(metadata.sender, "allocated", metadata.request_id)

    def _room_for(self, encoder_len: int) -> int | None:
        """The replica with the most free blocks if they hold the cross blocks and the headroom, or None. A pool
        that requests of this instance wait for is not open: blocks reserved there now would keep them waiting
        for as long as encoder outputs keep coming."""
        open_replicas = [r for r in range(len(self.kvs)) if not self.queued(r)]
        replica = max(open_replicas, key=lambda r: self.kvs[r].num_free_blocks, default=None)
        if replica is None:
            return None
        kv = self.kvs[replica]
        return replica if kv.num_blocks_for(encoder_len) + self.headroom_blocks <= kv.num_free_blocks else None

    def _inject(self, states: States) -> None:
        reservation = self.reserved.get(states.request_id)
        if reservation is None or reservation.written:
            self.stats.refused += 1
            logger.warning("encoder states for %r, which has no reservation (expired?): dropped", states.request_id)
            return
        metadata = reservation.metadata
        if tuple(states.tensor.shape) != metadata.shape:
            self._refuse(states.request_id, f"states of shape {list(states.tensor.shape)}; the metadata said "
                                            f"{list(metadata.shape)}")
            return
        try:
            self.writer(states.tensor.to(torch.float32), self.kvs[reservation.replica].cross_table(states.request_id),
                        metadata.encoder_len, reservation.replica)
        except Exception as error:  # a model that cannot take them: refuse this request, keep serving
            logger.exception("write_cross_kv failed for %r", states.request_id)
            self._refuse(states.request_id, f"write_cross_kv failed: {type(error).__name__}: {error}")
            return
        reservation.written = True
        reservation.deadline = time.monotonic() + self.timeout  # now the request itself has this long to come
        self.stats.injected += 1
        self._notify(metadata.sender, "injected", states.request_id)

    def _refuse(self, request_id: str | None, reason: str) -> None:
        self.stats.refused += 1
        self.stats.refusals.append(reason)
        logger.warning("refused encoder output%s: %s", f" of {request_id!r}" if request_id else "", reason)
        reservation = self.reserved.pop(request_id, None) if request_id is not None else None
        if reservation is not None:
            self.kvs[reservation.replica].free_cross(request_id)
            self._notify(reservation.metadata.sender, "injected", request_id, reason)

    def _withdrawn(self, withdrawal: Withdrawal) -> None:
        """Drop what the sender will not send: the request it names, or, when it stops, everything it has not sent
        (written outputs stay: their requests ended well on the encode instance and come here next)."""
        sender = withdrawal.sender

        def dropped(metadata: Metadata, written: bool) -> bool:
            if metadata.sender != sender:
                return False
            return metadata.request_id == withdrawal.request_id if withdrawal.request_id else not written

        if withdrawal.request_id is None:
            logger.warning("encode instance %r stops: %s", sender, withdrawal.reason)
        gone = [m for m in self.pending if dropped(m, False)]
        for metadata in gone:
            self.pending.remove(metadata)
        for request_id, reservation in list(self.reserved.items()):
            if dropped(reservation.metadata, reservation.written):
                del self.reserved[request_id]
                self.kvs[reservation.replica].free_cross(request_id)
                gone.append(reservation.metadata)
        for metadata in gone:
            self.stats.withdrawn += 1
            logger.warning("request %s: its encoder output will not come from encode instance %r (%s): its cross "
                           "blocks are free again", metadata.request_id, sender, withdrawal.reason)

    def _expire(self, now: float) -> None:
        for request_id, reservation in list(self.reserved.items()):
            if reservation.deadline <= now:
                del self.reserved[request_id]
                self.kvs[reservation.replica].free_cross(request_id)
                self.stats.expired += 1
                logger.warning("encoder output of %r %s within %.0f s: its cross blocks are free again", request_id,
                               "was not claimed" if reservation.written else "did not arrive", self.timeout)

    def _notify(self, target: str, channel: str, request_id: str, error: str | None = None) -> None:
        try:
            self.broker.send_notice(target, channel, Notice(request_id, error))
        except Exception as failure:  # the broker is down: the encode instance times out on its side
            logger.warning("could not send the %s notice of %r: %s", channel, request_id, failure)
