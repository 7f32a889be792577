"""The host backend: ttnn's API computed with torch on the CPU, under ttnn's semantics.

Importable on its own (``from tt_models.runtime import host as ttnn``). It covers the ops the
tt-models models use, with the real ttnn 0.81.1 signatures (checked by the test suite), ttnn's tile
padding, dtype rounding (bfloat8_b/bfloat4_b bit-exact with ``ttnn.from_torch``) and the validation
errors the real ops raise. Each op module lists its public names in ``__all__``.
"""

from . import experimental, transformer  # noqa: F401  (ttnn's sub-namespaces)
from .collectives import *  # noqa: F401,F403
from .core import *  # noqa: F401,F403
from .data_movement import *  # noqa: F401,F403
from .device import *  # noqa: F401,F403
from .eltwise import *  # noqa: F401,F403
from .embedding import *  # noqa: F401,F403
from .errors import TTFatal  # noqa: F401
from .kv_cache import *  # noqa: F401,F403
from .matmul import *  # noqa: F401,F403
from .mesh import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .sampling import *  # noqa: F401,F403
from .tensor import Tensor  # noqa: F401
from .trace import *  # noqa: F401,F403
from .types import *  # noqa: F401,F403
from .mesh import per_chip as _per_chip
from .trace import recorded as _recorded
import sys as _sys

# The op modules by module name: ``from . import matmul`` would give the ``matmul`` function that
# ``from .matmul import *`` put in this namespace (likewise ``sampling``, ``embedding``).
_core, _dm, _eltwise, _embedding, _kv_cache, _matmul, _normalization, _reduction, _sampling = (
    _sys.modules[f"{__name__}.{_m}"] for _m in ("core", "data_movement", "eltwise", "embedding", "kv_cache",
                                                 "matmul", "normalization", "reduction", "sampling"))

# Device ops run chip by chip on a mesh (see mesh.py) and are recorded while a trace is being captured (see
# trace.py); the collectives, which read across chips, are only recorded.
_DEVICE_OPS = ["to_layout", "typecast", "to_memory_config", "interleaved_to_sharded", "sharded_to_interleaved", "clone"]
for _module, _names in [(_core, _DEVICE_OPS), (_dm, None), (_eltwise, None), (_embedding, None), (_kv_cache, None),
                        (_matmul, None), (_normalization, None), (_reduction, None), (_sampling, None),
                        (experimental, None), (transformer, None)]:
    for _name in _names or getattr(_module, "__all__", []):
        _fn = getattr(_module, _name)
        if callable(_fn) and not isinstance(_fn, type) and not hasattr(_fn, "__wrapped__"):
            setattr(_module, _name, _recorded(_per_chip(_fn)))
            if _module not in (experimental, transformer):
                globals()[_name] = getattr(_module, _name)
_collectives = _sys.modules[f"{__name__}.collectives"]
for _name in _collectives.__all__:
    setattr(_collectives, _name, _recorded(getattr(_collectives, _name)))
    globals()[_name] = getattr(_collectives, _name)

BACKEND = "host"
