"""Where TT-NN runs: a Tenstorrent device, the real ttnn on a mock device, or the host backend.

Model code reaches ttnn through one import point and reads like tt-metal model code::

    from tt_models.runtime import ttnn

    y = ttnn.linear(x, w, bias=b)

``ttnn`` forwards to the active API: the one of the device in the innermost ``with use(device):``
block, else that of the most recently opened device (the real ``ttnn`` module for ``"ttnn"`` and
``"mock"``, :mod:`tt_models.runtime.host` for ``"host"``).
"""

from types import ModuleType
from typing import Any

from .backend import (  # noqa: F401
    BACKEND_ENV, BACKENDS, active_api, api_for, backend_of, close_device, default_backend, open_device,
    supports_trace, tt_device_present, use,
)


class _ActiveTTNN(ModuleType):
    """Module-like proxy: attribute lookups go to the active backend's ttnn API."""

    def __getattr__(self, name: str) -> Any:
        return getattr(active_api(), name)


ttnn = _ActiveTTNN("ttnn", "The ttnn API of the active backend (see tt_models.runtime).")
