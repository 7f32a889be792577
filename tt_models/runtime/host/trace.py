"""Trace capture and replay on the host backend.

On a TT device a trace records the device commands of the ops run between ``begin_trace_capture`` and
``end_trace_capture``; ``execute_trace`` replays them on the same buffers. New inputs reach a trace only
by being copied into the captured input tensors (``copy_host_to_device_tensor``), and results are read
from the captured output tensors. The host backend records each op call and replays it, writing the
results into the tensors captured as outputs, so traced model code behaves as on hardware, including
its mistakes (a Python value baked into the capture stays baked in).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from .device import MeshDevice
from .mesh import MeshTensor
from .errors import check
from .tensor import Tensor

__all__ = ["MeshTraceId", "begin_trace_capture", "end_trace_capture", "execute_trace", "release_trace"]

_trace_ids = itertools.count()


@dataclass(frozen=True)
class MeshTraceId:
    id: int


@dataclass
class _Trace:
    device: MeshDevice
    calls: list[tuple[Callable, tuple, dict, Any]] = field(default_factory=list)
    complete: bool = False


_traces: dict[MeshTraceId, _Trace] = {}
_capturing: list[_Trace] = []  # the trace being captured (at most one)


def begin_trace_capture(mesh_device: MeshDevice, *, cq_id: int | None = None) -> MeshTraceId:
    check(not _capturing, "begin_trace_capture", "a trace capture is already in progress")
    trace_id = MeshTraceId(next(_trace_ids))
    _traces[trace_id] = trace = _Trace(mesh_device)
    _capturing.append(trace)
    return trace_id


def end_trace_capture(mesh_device: MeshDevice, trace_id: MeshTraceId, *, cq_id: int | None = None) -> None:
    trace = _traces.get(trace_id)
    check(trace is not None and _capturing and _capturing[0] is trace, "end_trace_capture",
          f"trace {trace_id} is not being captured")
    _capturing.clear()
    trace.complete = True


def execute_trace(mesh_device: MeshDevice, trace_id: MeshTraceId, *, cq_id: int | None = None,
                  blocking: bool = True) -> None:
    trace = _traces.get(trace_id)
    check(trace is not None and trace.complete, "execute_trace", f"trace {trace_id} was not captured")
    check(trace.device is mesh_device, "execute_trace", "the trace was captured on another device")
    for fn, args, kwargs, captured in trace.calls:
        for old, new in zip(_tensors(captured), _tensors(fn(*args, **kwargs))):
            if old is not new:
                old.value = new.value


def release_trace(mesh_device: MeshDevice, trace_id: MeshTraceId) -> None:
    check(_traces.pop(trace_id, None) is not None, "release_trace", f"unknown trace {trace_id}")


def capturing() -> bool:
    return bool(_capturing)


def recorded(fn: Callable) -> Callable:
    """Wrap a device op so that calls made during a capture are recorded for replay."""

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if _capturing:
            _capturing[0].calls.append((fn, args, kwargs, result))
        return result

    return op


def _tensors(result: Any) -> list[Tensor]:
    """The per-chip tensors of an op's result."""
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, MeshTensor):
        return list(result.shards)
    if isinstance(result, (list, tuple)):
        return [t for r in result for t in _tensors(r)]
    return []
