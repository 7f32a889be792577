"""Captured decode traces with persistent device inputs (as tt_transformers' ``Generator`` keeps them).

One trace per (replica, key): the key holds the sampling mode and every input's shape, dtype and layout, so a
change of page-table width or of sampling mode captures anew while changing values (tokens, positions, page
tables, masks, sampling parameters) only reach the captured inputs by ``copy_host_to_device_tensor``. A tracked
input (:func:`~tt_models.tt.decode_inputs.tracked_ints`) is copied only when its values differ from those the
capture holds: a page table changes when a row crosses a block boundary or the batch's layout changes, not at every
step, and positions the step advances on the device hold the next step's already unless the batch changed.
Prefill traces are kept the same way (a generator's ``prefill_traces``), captured at warm-up only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Hashable

import torch

from tt_models.runtime import active_api, ttnn
from tt_models.tt.decode_inputs import HostInput, HostInputs, to_device


@dataclass
class CapturedDecode:
    api: ModuleType  # the ttnn API that captured it, which alone can release it
    device: Any
    trace_id: Any
    inputs: dict[str, Any]  # the persistent device inputs the trace reads
    outputs: Any  # the device tensors the trace writes
    # Per tracked input, the values its device tensor holds (those the results depend on); none before the first
    # replay: what a capture's own runs leave there depends on the backend.
    held: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class DecodeTraces:
    captures: dict[tuple[int, Hashable], CapturedDecode] = field(default_factory=dict)
    executions: int = 0  # execute_trace calls (the tests count one per replica and step)
    copies: Counter[str] = field(default_factory=Counter)  # per input name, copies into a capture
    skipped: Counter[str] = field(default_factory=Counter)  # per tracked input, copies skipped as unchanged

    def run(self, replica: int, device: Any, mode: Hashable, inputs: HostInputs,
            forward: Callable[[dict[str, Any]], Any], feed: Callable[[dict[str, Any]], None] | None = None,
            fed: frozenset[str] = frozenset()) -> Any:
        """``forward(device_inputs)`` through the replica's trace for this mode and these input shapes: captured
        on first use (after a compile run), then replayed with the new inputs copied in, a tracked one only when it
        differs from what the capture holds. ``feed(device_inputs)`` writes the inputs named ``fed`` on the device
        instead (:mod:`tt_models.tt.decode_feedback`)."""
        key = self._key(replica, mode, inputs)
        captured = self.captures.get(key)
        if captured is None:
            captured = self.captures[key] = self._capture(device, inputs, forward, feed)
        for name, host in inputs.items():
            if name not in fed:
                self._copy(captured, name, host)
        if feed is not None:
            feed(captured.inputs)
        ttnn.execute_trace(device, captured.trace_id, cq_id=0, blocking=False)
        self.executions += 1
        for name, host in inputs.items():
            if host.advance is not None:
                captured.held[name] = host.advance(captured.held[name])
        return captured.outputs

    def captured(self, replica: int, mode: Hashable, inputs: HostInputs) -> bool:
        """Whether :meth:`run` would replay (not capture) for these inputs."""
        return self._key(replica, mode, inputs) in self.captures

    def _copy(self, captured: CapturedDecode, name: str, host: HostInput) -> None:
        """Copy one input into the capture, unless it is tracked and the capture holds its values already."""
        held = captured.held.get(name)
        if host.values is not None and held is not None and torch.equal(host.values, held):
            self.skipped[name] += 1
            return
        ttnn.copy_host_to_device_tensor(host.tensor, captured.inputs[name])
        self.copies[name] += 1
        if host.values is not None:
            captured.held[name] = host.values

    @staticmethod
    def _key(replica: int, mode: Hashable, inputs: HostInputs) -> tuple[int, Hashable]:
        return replica, (mode, tuple(sorted((name, i.signature) for name, i in inputs.items())))

    @staticmethod
    def _capture(device: Any, inputs: HostInputs, forward: Callable[[dict[str, Any]], Any],
                 feed: Callable[[dict[str, Any]], None] | None) -> CapturedDecode:
        device_inputs = to_device(inputs, device)
        if feed is not None:
            feed(device_inputs)
        forward(device_inputs)  # compile run: every program exists before capture (its writes are replayed below)
        if any(i.advance is not None for i in inputs.values()):
            # The compile run advanced the positions; a capture runs the step too on the host backend, whose K/V
            # writes must go where the step's own do (not a block past a row's last, which may be another row's).
            for name, i in inputs.items():
                ttnn.copy_host_to_device_tensor(i.tensor, device_inputs[name])
            if feed is not None:
                feed(device_inputs)
        trace_id = ttnn.begin_trace_capture(device, cq_id=0)
        outputs = forward(device_inputs)
        ttnn.end_trace_capture(device, trace_id, cq_id=0)
        return CapturedDecode(active_api(), device, trace_id, device_inputs, outputs)

    def release(self) -> None:
        """Release every trace through the API that captured it: a generator collected later (by a finalizer, at
        any point of any thread) may find another backend active (a host generator freed while a mock device is
        open), and a finalizer must not change which one is."""
        for captured in self.captures.values():
            captured.api.release_trace(captured.device, captured.trace_id)
        self.captures.clear()
