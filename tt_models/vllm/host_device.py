"""TT vLLM on a machine with no card: vllm-tt-plugin's worker opens a tt-models host device.

With ``TT_MODELS_BACKEND=host``, tt-models' general plugin replaces exactly two functions of the real
plugin, ``vllm_tt_plugin.worker.open_mesh_device`` and ``close_mesh_device`` (the only ones that touch a
device), with ones that open and close ``tt_models.runtime``'s host device; the platform, scheduler, worker,
model runner and loader are the plugin's own. The mesh shape comes from ``MESH_DEVICE`` (and
``TT_VISIBLE_DEVICES``) through the plugin's own ``_resolve_mesh_grid``, as if the host had every chip
asked for; unset, 1x1.

vLLM runs general plugins in every process before it resolves the worker class, but the worker module
imports ttnn and half of vLLM, so it is not imported here: if it is not loaded yet, an import hook patches
it when it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from tt_models.runtime import BACKEND_ENV, close_device, open_device

logger = logging.getLogger("vllm.tt_models")

WORKER_MODULE = "vllm_tt_plugin.worker"


def use_host_device_if_requested() -> None:
    """Make vllm-tt-plugin's worker open a host device when ``TT_MODELS_BACKEND=host``; else nothing."""
    if os.environ.get(BACKEND_ENV) != "host":
        return
    worker = sys.modules.get(WORKER_MODULE)
    if worker is not None:
        _patch(worker)
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def host_mesh_shape(worker: ModuleType) -> tuple[int, int]:
    """The grid the plugin would open for ``MESH_DEVICE`` / ``TT_VISIBLE_DEVICES`` (N150 1x1, N300 1x2, T3K 1x8,
    "(r, c)", ...), the host standing in for as many chips as asked for; 1x1 when ``MESH_DEVICE`` is unset."""
    visible = os.environ.get(worker.TTPlatform.device_control_env_var)
    return tuple(worker._resolve_mesh_grid(os.environ.get("MESH_DEVICE"), 1, visible))


def _patch(worker: ModuleType) -> None:
    def open_mesh_device(tt_config: dict[str, Any], trace_mode: str, local_dp_rank: int = 0) -> Any:
        shape = host_mesh_shape(worker)
        logger.info("tt-models: %s=host: vllm_tt_plugin's worker opens a tt-models host device as a %dx%d mesh "
                    "(MESH_DEVICE=%s) instead of a TT mesh", BACKEND_ENV, *shape, os.environ.get("MESH_DEVICE"))
        return open_device("host", mesh_shape=shape)

    def close_mesh_device(mesh_device: Any, tt_config: dict[str, Any]) -> None:
        close_device(mesh_device)

    worker.open_mesh_device, worker.close_mesh_device = open_mesh_device, close_mesh_device


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ``vllm_tt_plugin.worker`` as the path finder does, with a loader that patches it once executed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != WORKER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, ...: tracebacks and inspect read these
        return getattr(self.loader, name)
