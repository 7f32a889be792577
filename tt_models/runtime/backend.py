"""Choosing and opening the device TT-NN code runs on: a TT device, the mock device, or the host."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

BACKEND_ENV = "TT_MODELS_BACKEND"
BACKENDS = ("ttnn", "mock", "host")
# Mock boards and the meshes they open as.
MOCK_BOARDS = {"n150": (1, 1), "n300": (1, 2), "p150": (1, 1), "t3k": (1, 8), "p150x4": (1, 4)}

# Open devices, most recent last: (device, backend name, API module).
_open: list[tuple[Any, str, ModuleType]] = []
# APIs made active by ``use(device)``, innermost last.
_used: list[ModuleType] = []


def tt_device_present() -> bool:
    """Whether this machine has a Tenstorrent card (the kernel driver's device nodes)."""
    return Path("/dev/tenstorrent").is_dir()


def default_backend() -> str:
    """``$TT_MODELS_BACKEND`` if set, else ``"ttnn"`` when a TT card is present, else ``"host"``."""
    chosen = os.environ.get(BACKEND_ENV)
    if chosen:
        if chosen not in BACKENDS:
            raise ValueError(f"{BACKEND_ENV}={chosen!r}: expected one of {', '.join(BACKENDS)}")
        return chosen
    return "ttnn" if tt_device_present() else "host"


def api_module(backend: str) -> ModuleType:
    """The ttnn API of a backend: the real ``ttnn`` for ``"ttnn"``/``"mock"``, else the host backend."""
    if backend == "host":
        from tt_models.runtime import host

        return host
    if backend in ("ttnn", "mock"):
        import ttnn

        return ttnn
    raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def api_for(device: Any) -> ModuleType:
    """The ttnn API that drives ``device``: the host backend for its devices, the real ttnn for any other
    (including devices opened by someone else, e.g. TT vLLM)."""
    from tt_models.runtime import host

    return host if isinstance(device, host.MeshDevice) else api_module("ttnn")


@contextmanager
def use(device: Any) -> Iterator[None]:
    """Make ``device``'s API the active ttnn API inside the block (model entry points wrap their work in it)."""
    _used.append(api_for(device))
    try:
        yield
    finally:
        _used.pop()


def open_device(backend: str | None = None, *, mesh_shape: tuple[int, int] = (1, 1), board: str | None = None,
                **device_kwargs: Any) -> Any:
    """Open a device (always a mesh device, 1x1 for one chip) and make its backend the active ttnn API.

    ``backend``: ``"ttnn"`` (a real TT device or mesh), ``"mock"`` (the real ttnn on a mock cluster: ``board``
    ``"n150"`` or ``"p150"``, ``"n300"`` as a 1x2 mesh, ``"t3k"`` as 1x8, ``"p150x4"`` as 1x4) or ``"host"``; ``None``
    picks :func:`default_backend`. ``device_kwargs`` go to ``open_mesh_device`` (``l1_small_size``,
    ``trace_region_size``, ...). A multi-chip mesh of the real ttnn opens with 1D fabric (see :func:`_uses_fabric`).
    """
    backend = backend or default_backend()
    api = api_module(backend)
    mesh_shape = tuple(mesh_shape)
    if backend == "mock":
        board = board or next((b for b, shape in MOCK_BOARDS.items() if shape == mesh_shape), None)
        if board not in MOCK_BOARDS:
            raise ValueError(f"mock backend: no mock board with a {mesh_shape} mesh "
                             f"(boards: {', '.join(f'{b} {s}' for b, s in MOCK_BOARDS.items())})")
        if MOCK_BOARDS[board] != mesh_shape and mesh_shape != (1, 1):
            raise ValueError(f"mock backend: board {board} opens as a {MOCK_BOARDS[board]} mesh, not {mesh_shape}")
        from tt_models.runtime import mock

        mock.activate(board)
        mesh_shape = MOCK_BOARDS[board]
    if _uses_fabric(backend, mesh_shape[0] * mesh_shape[1]):
        api.set_fabric_config(api.FabricConfig.FABRIC_1D)
    device = api.open_mesh_device(api.MeshShape(*mesh_shape), **device_kwargs)
    _open.append((device, backend, api))
    return device


def close_device(device: Any) -> None:
    """Close a device opened by :func:`open_device`; the previously opened one's backend becomes active."""
    for i, (dev, backend, api) in enumerate(_open):
        if dev is device:
            del _open[i]
            fabric = _uses_fabric(backend, device.get_num_devices())
            api.close_mesh_device(device)
            if fabric:
                api.set_fabric_config(api.FabricConfig.DISABLED)
            return
    raise ValueError(f"close_device: {device!r} was not opened by tt_models.runtime.open_device")


def _uses_fabric(backend: str, num_chips: int) -> bool:
    """CCL ops (all_gather, reduce_scatter, all_reduce) on a mesh of the real ttnn need tt-metal's fabric, which must
    be configured before the mesh opens (as TT vLLM's plugin does) and is reset after it closes; the host backend
    has none."""
    return backend != "host" and num_chips > 1


def backend_of(device: Any) -> str:
    """The backend name a device was opened with. A device opened elsewhere (TT vLLM's worker opens its mesh with the
    real ttnn) or a submesh is the host backend's if it is a host device, else the real ttnn's on a mock cluster when
    ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` is set (tt-metal then opens nothing but mock devices), else on TT hardware."""
    for dev, backend, _ in _open:
        if dev is device:
            return backend
    from tt_models.runtime import host
    from tt_models.runtime.mock import MOCK_ENV_VAR

    if isinstance(device, host.MeshDevice):
        return "host"
    return "mock" if os.environ.get(MOCK_ENV_VAR) else "ttnn"


def active_api() -> ModuleType:
    """The API made active by :func:`use`, else that of the most recently opened device, else the default
    backend's."""
    if _used:
        return _used[-1]
    return _open[-1][2] if _open else api_module(default_backend())


def supports_trace(device: Any) -> bool:
    """Trace capture crashes on the mock device (tt-metal dereferences a mocked buffer), so skip it there."""
    return backend_of(device) == "ttnn"
