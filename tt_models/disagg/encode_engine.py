"""The engine of an encode instance: requests in, encoders run, encoder states out to prefill-decode instances.

It has no KV cache. Requests enter as they enter a prefill-decode instance (``RequestIntake``: the same checks and
``InputProcessor``, so bad input is refused here with the same error), then are encoded first come first served, up
to ``max_num_seqs`` requests and ``max_num_batched_tokens`` encoder positions per ``encode_forward`` call. For each
request it sends the metadata to the prefill-decode instance the proxy chose, waits for the allocation notice, sends
the states, waits for the injection notice and ends the request with an empty output (that end tells the proxy to
send the request on). A request without an encoder input (a text-only request to an image+text model) ends at
once. A request fails (``TransferError``) when the broker cannot be reached, when a notice is overdue, and when the
broker went down while its messages were in flight (a restarted Redis has lost them).

A request that ends here once announced (aborted: its client left or the server stops; failed) is withdrawn from its
prefill-decode instance, which frees what it holds for it at once; at :meth:`~EncodeEngine.close` (the server's
stop) every prefill-decode instance it announced to hears that nothing more is coming from it.

It serves the same interface as :class:`~tt_models.engine.llm_engine.LLMEngine` to the server's engine loop.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import redis
import torch

from tt_models.checkpoints import Checkpoint, load_hf_checkpoint
from tt_models.disagg.broker import WIRE_DTYPE, Broker, Metadata, Notice, PayloadError, Withdrawal
from tt_models.disagg.connector import Connector
from tt_models.disagg.routing import TransferError, prefill_decode_target
from tt_models.engine.config import EngineConfig
from tt_models.engine.inputs import ProcessedInputs
from tt_models.engine.intake import RequestIntake
from tt_models.engine.model_runner import generator_class
from tt_models.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from tt_models.engine.prompts import PromptType
from tt_models.engine.sampling import SamplingParams
from tt_models.runtime import close_device, open_device

logger = logging.getLogger(__name__)


class Stage(enum.Enum):
    WAITING = "waiting"  # to be encoded
    AWAITING_ALLOCATION = "awaiting_allocation"
    AWAITING_INJECTION = "awaiting_injection"


class EncodeRequest:
    def __init__(self, request_id: str, inputs: ProcessedInputs, target: str, arrival_time: float) -> None:
        self.request_id = request_id
        self.inputs = inputs
        self.target = target
        self.stage = Stage.WAITING
        self.states: torch.Tensor | None = None
        self.deadline = float("inf")
        self.outages = 0  # the connector's outage count when its last message went out
        self.metrics = RequestMetrics(arrival_time)

    def output(self, error: BaseException | None = None, aborted: bool = False) -> RequestOutput:
        self.metrics.finished_time = time.monotonic()
        inputs = self.inputs
        reason = "abort" if error is not None or aborted else "stop"
        return RequestOutput(self.request_id, inputs.prompt, list(inputs.prompt_token_ids), None,
                             [CompletionOutput(0, "", [], None, None, reason)], True,
                             self.metrics, inputs.encoder_prompt,
                             None if inputs.encoder_prompt_token_ids is None else list(inputs.encoder_prompt_token_ids),
                             error=error)


class EncodeEngine(RequestIntake[EncodeRequest]):
    """``allocation_timeout``: how long a request waits for a prefill-decode pool to make room (long: waiting is
    backpressure, not failure); ``transfer_timeout``: how long for the injection notice once the states are sent;
    ``mesh_shape``: the mesh one encoder replica is tensor-parallel over."""

    decodes = False  # its outputs carry no tokens: code above the engine must not read them

    def __init__(self, checkpoint: Checkpoint, config: EngineConfig, broker: Broker, *, backend: str | None = None,
                 optimizations: str | None = None, allocation_timeout: float = 600.0,
                 transfer_timeout: float = 30.0, mesh_shape: tuple[int, int] | None = None) -> None:
        super().__init__(checkpoint, config)
        hf_config = checkpoint.config
        cls = generator_class(hf_config)
        if not (hasattr(cls, "encode_forward") and hasattr(cls, "write_cross_kv")):
            raise ValueError(f"{cls.__name__} cannot run on an encode instance: it has no encode_forward / "
                             "write_cross_kv")
        self.device = open_device(backend, mesh_shape=mesh_shape or (1, 1))  # the encoder tensor-parallel over it
        self.model = cls.from_state_dict(hf_config, checkpoint.state_dict, self.device, self.config.max_num_seqs,
                                         max_seq_len=self.config.max_model_len, optimizations=optimizations)
        self.broker = broker
        self.connector = Connector(broker, ("allocated", "injected"))
        self.allocation_timeout = allocation_timeout
        self.transfer_timeout = transfer_timeout
        self.waiting: deque[EncodeRequest] = deque()
        self._done: list[RequestOutput] = []  # ended without a model step (no encoder input, refused, failed)
        self.stats = {"encoded": 0}
        self.peers: set[str] = set()  # the prefill-decode instances announced to: told when this one stops
        self.connector.start()

    @classmethod
    def from_model(cls, model: str, config: EngineConfig, broker: Broker, **kwargs: Any) -> EncodeEngine:
        return cls(load_hf_checkpoint(model), config, broker, **kwargs)

    def close(self) -> None:
        """Withdraw the requests still here, tell every prefill-decode peer that nothing more is coming, and close
        the device."""
        for request_id in list(self.requests):
            self.abort_request(request_id)
        for peer in sorted(self.peers):
            if not self._withdraw(peer, None, f"encode instance {self.broker.instance!r} is stopping"):
                break  # the broker is down: each try would wait for its timeout
        self.connector.stop()
        close_device(self.device)

    def set_waker(self, wake: Callable[[], None]) -> None:
        self.connector.wake = wake

    def num_in_stage(self, stage: Stage) -> int:
        return sum(r.stage is stage for r in self.requests.values())

    # Requests.

    def add_request(self, request_id: str, prompt: PromptType, params: SamplingParams | None = None, *,
                    arrival_time: float | None = None, language: str | None = None, task: str | None = None,
                    previous_text: str | None = None, target: str | None = None,
                    max_tokens_param: str | None = None) -> EncodeRequest:
        """Queue a request whose decoder runs on the prefill-decode instance ``target`` (default: the one the
        proxy named for the HTTP request being served). Raises ValueError as ``LLMEngine.add_request`` does."""
        target = target or prefill_decode_target.get()
        if not target:
            raise ValueError("an encode instance serves requests through the proxy (tt-models proxy), which names "
                             "their prefill-decode instance")
        _, inputs = self._accept(request_id, prompt, params, language=language, task=task, previous_text=previous_text,
                                 max_tokens_param=max_tokens_param)
        request = EncodeRequest(request_id, inputs, target, time.monotonic() if arrival_time is None else arrival_time)
        self.requests[request_id] = request
        if inputs.encoder_input is None:
            self._end(request)
        else:
            self.waiting.append(request)
        return request

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """End a request wherever it is. A reservation it left on a prefill-decode instance expires there."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        if request.stage is Stage.WAITING:
            if request in self.waiting:
                self.waiting.remove(request)
        else:
            self._withdraw(request.target, request_id, "the request was aborted on the encode instance")
        return request.output(aborted=True)

    def has_unfinished_requests(self) -> bool:
        """Whether there is work for :meth:`step`; requests that only wait for notices need :meth:`service`."""
        return bool(self.waiting or self._done)

    # Steps.

    def step(self) -> list[RequestOutput]:
        # FCFS batches within the prefill token budget, as the both-role scheduler spends it on encoders: small
        # batches hand the first outputs over sooner, and the prefill-decode instance starts on them meanwhile.
        batch, budget = [], self.config.max_num_batched_tokens
        while self.waiting and len(batch) < self.config.max_num_seqs:
            cost = self.waiting[0].inputs.encoder_len
            if batch and cost > budget:
                break
            budget -= cost
            batch.append(self.waiting.popleft())
        if batch:
            states = self.model.encode_forward([r.inputs.encoder_input for r in batch])
            self.stats["encoded"] += len(batch)
            for request, tensor in zip(batch, states):
                request.metrics.first_scheduled_time = time.monotonic()
                self._announce(request, tensor)
        return self.service()

    def service(self) -> list[RequestOutput]:
        """Act on the notices received, and fail requests whose notice is overdue."""
        for channel, message in self.connector.messages():
            if isinstance(message, PayloadError):
                continue  # a malformed notice names no request we could fail
            self._notice(channel, message)
        now = time.monotonic()
        for request in list(self.requests.values()):
            if request.stage is not Stage.WAITING and self.connector.outages > request.outages:
                self._fail(request, "the broker went down while its encoder output was in transit", withdraw=False)
            elif request.deadline <= now:
                allocation = request.stage is Stage.AWAITING_ALLOCATION
                self._fail(request, f"no {'allocation' if allocation else 'injection'} notice from prefill-decode "
                                    f"instance {request.target!r} within "
                                    f"{self.allocation_timeout if allocation else self.transfer_timeout:g} s")
        done, self._done = self._done, []
        return done

    def _announce(self, request: EncodeRequest, tensor: torch.Tensor) -> None:
        states = tensor.to(torch.bfloat16)
        metadata = Metadata(request.request_id, self.broker.instance, request.inputs.encoder_len, tuple(states.shape),
                            WIRE_DTYPE)
        request.states = states
        request.stage = Stage.AWAITING_ALLOCATION
        self.peers.add(request.target)
        request.deadline = time.monotonic() + self.allocation_timeout
        self._send(request, lambda: self.broker.send_metadata(request.target, metadata))

    def _notice(self, channel: str, notice: Notice) -> None:
        request = self.requests.get(notice.request_id)
        expected = Stage.AWAITING_ALLOCATION if channel == "allocated" else Stage.AWAITING_INJECTION
        if request is None or request.stage is not expected:
            return  # aborted or failed meanwhile
        if notice.error is not None:
            self._fail(request, f"prefill-decode instance {request.target!r} refused it: {notice.error}",
                       withdraw=False)
        elif channel == "allocated":
            request.stage = Stage.AWAITING_INJECTION
            request.deadline = time.monotonic() + self.transfer_timeout
            states, request.states = request.states, None
            self._send(request, lambda: self.broker.send_states(request.target, request.request_id, states))
        else:
            self._end(request)

    def _send(self, request: EncodeRequest, send: Callable[[], None]) -> None:
        request.outages = self.connector.outages
        try:
            send()
        except redis.RedisError as error:
            self._fail(request, f"the broker is unreachable: {error}", withdraw=False)

    def _end(self, request: EncodeRequest) -> None:
        self.requests.pop(request.request_id, None)
        self._done.append(request.output())

    def _fail(self, request: EncodeRequest, reason: str, withdraw: bool = True) -> None:
        """``withdraw``: tell its prefill-decode instance (not when that one refused it, nor through a broker that
        just failed)."""
        self.requests.pop(request.request_id, None)
        if withdraw and request.stage is not Stage.WAITING:
            self._withdraw(request.target, request.request_id, f"it failed on the encode instance: {reason}")
        self._done.append(request.output(TransferError(f"request {request.request_id!r}: {reason}")))

    def _withdraw(self, target: str, request_id: str | None, reason: str) -> bool:
        """Send a withdrawal; False when the broker is unreachable (the peer's timeout frees what it holds)."""
        try:
            self.broker.send_withdrawal(target, Withdrawal(self.broker.instance, request_id, reason))
        except redis.RedisError as error:
            logger.warning("could not tell %r that %s: %s", target,
                           f"request {request_id} was withdrawn" if request_id else "this instance stops", error)
            return False
        return True
