"""Run the real ttnn (0.81.1) on a *mock* Tenstorrent device, on machines without TT hardware.

A mock device is opened by tt-metal itself when ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` points at
a cluster-descriptor YAML: all driver calls are mocked, so device reads return zeros and
writes are dropped, but host-side validation, program creation, buffer allocation and the
program cache run for real.  Kernels and firmware are still "JIT-built", so a stand-in for the
sfpi compiler (``fake_sfpi_gxx.py``, stub outputs only) must be installed into the ttnn
package, where tt-metal looks for the compiler first.

Typical use (tests / CI)::

    from tt_models.runtime import mock
    mock.activate("n150")          # before the first ttnn device open in this process
    import ttnn
    dev = ttnn.open_device(device_id=0)

or once per virtualenv: ``python -m tt_models.runtime.mock install``.

The stand-in must never be used with real hardware: it refuses to run unless
``TT_METAL_MOCK_CLUSTER_DESC_PATH`` is set, and :func:`uninstall` removes it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

__all__ = [
    "BOARDS",
    "MOCK_ENV_VAR",
    "activate",
    "descriptor_path",
    "environment",
    "find_ttnn_dir",
    "install",
    "is_installed",
    "uninstall",
]

PACKAGE_DIR = Path(__file__).resolve().parent
STAND_IN = PACKAGE_DIR / "fake_sfpi_gxx.py"
WRAPPER = PACKAGE_DIR / "fake_sfpi_gxx.sh"  # the shell front the compiler names run
MOCK_ENV_VAR = "TT_METAL_MOCK_CLUSTER_DESC_PATH"
CACHE_ENV_VAR = "TT_METAL_CACHE"
LOGS_ENV_VAR = "TT_METAL_LOGS_PATH"

#: Supported mock boards -> cluster descriptor file shipped in this package.
BOARDS: dict[str, str] = {"n150": "n150.yaml", "n300": "n300.yaml", "p150": "p150.yaml", "t3k": "t3k.yaml",
                          "p150x4": "p150x4.yaml"}

# Names tt-metal 0.81.1 (and older builds) look for in <ttnn>/runtime/sfpi/compiler/bin.
_COMPILER_NAMES = ("riscv-tt-elf-g++", "riscv32-tt-elf-g++")
_STAND_IN_NAME = "fake_sfpi_gxx.py"
_WRAPPER_MARKER = "# tt_models mock sfpi stand-in"


def find_ttnn_dir() -> Path:
    """Directory of the installed ``ttnn`` package, found without importing it (import is slow).

    Raises:
        ModuleNotFoundError: if ttnn is not installed in this interpreter's environment.
    """
    spec = importlib.util.find_spec("ttnn")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("ttnn is not installed in this Python environment")
    return Path(spec.origin).resolve().parent


def _bin_dir(ttnn_dir: str | os.PathLike[str] | None) -> Path:
    root = Path(ttnn_dir).resolve() if ttnn_dir is not None else find_ttnn_dir()
    return root / "runtime" / "sfpi" / "compiler" / "bin"


def _wrapper_text(python: str, stand_in: Path) -> str:
    """The compiler the JIT build runs: a shell front (``fake_sfpi_gxx.sh``) of the stand-in run by ``python``."""
    return WRAPPER.read_text(encoding="utf-8").replace("@PYTHON@", python).replace("@STAND_IN@", str(stand_in))


def _write_if_changed(path: Path, text: str, mode: int) -> None:
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(mode)
        tmp.replace(path)  # atomic: a concurrent tt-metal JIT build never sees a partial file
    elif (path.stat().st_mode & 0o777) != mode:
        path.chmod(mode)


def install(ttnn_dir: str | None = None, python: str | None = None) -> Path:
    """Install the sfpi compiler stand-in into the ttnn package; idempotent.

    Writes ``<ttnn>/runtime/sfpi/compiler/bin/fake_sfpi_gxx.py`` and the shell wrappers
    ``riscv-tt-elf-g++`` and ``riscv32-tt-elf-g++`` (``fake_sfpi_gxx.sh``: they answer compiles and repeated
    kernel links themselves and ``exec <python> -S`` the stand-in for the rest).

    Args:
        ttnn_dir: the ttnn package directory; default: the one this interpreter would import.
        python: absolute path of the interpreter the wrappers run (it only needs the standard
            library, and ``-S`` skips site-packages); default: ``sys.executable``.

    Returns:
        The ``bin`` directory the compiler was installed into.
    """
    bin_dir = _bin_dir(ttnn_dir)
    interpreter = os.path.abspath(python or sys.executable)
    if not os.access(interpreter, os.X_OK):
        raise FileNotFoundError(f"interpreter for the sfpi stand-in is not executable: {interpreter}")
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir.parent.parent / "include").mkdir(parents=True, exist_ok=True)
    stand_in = bin_dir / _STAND_IN_NAME
    _write_if_changed(stand_in, STAND_IN.read_text(encoding="utf-8"), 0o755)
    for name in _COMPILER_NAMES:
        _write_if_changed(bin_dir / name, _wrapper_text(interpreter, stand_in), 0o755)
    return bin_dir


def is_installed(ttnn_dir: str | None = None) -> bool:
    """True if the current stand-in and both wrappers are installed into ttnn and runnable."""
    try:
        bin_dir = _bin_dir(ttnn_dir)
    except ModuleNotFoundError:
        return False
    stand_in = bin_dir / _STAND_IN_NAME
    try:
        if stand_in.read_text(encoding="utf-8") != STAND_IN.read_text(encoding="utf-8"):
            return False
        for name in _COMPILER_NAMES:
            wrapper = bin_dir / name
            text = wrapper.read_text(encoding="utf-8")
            interpreter = text.partition('PYTHON="')[2].partition('"')[0]
            if not (os.access(wrapper, os.X_OK) and os.access(interpreter, os.X_OK)
                    and text == _wrapper_text(interpreter, stand_in)):
                return False
    except (OSError, IndexError):
        return False
    return True


def uninstall(ttnn_dir: str | None = None) -> Path:
    """Remove the stand-in and wrappers installed by :func:`install` (only those files).

    Returns the ``bin`` directory they were removed from.
    """
    bin_dir = _bin_dir(ttnn_dir)
    for name in _COMPILER_NAMES:
        wrapper = bin_dir / name
        try:
            if _WRAPPER_MARKER in wrapper.read_text(encoding="utf-8"):
                wrapper.unlink()
        except (OSError, UnicodeDecodeError):
            pass
    (bin_dir / _STAND_IN_NAME).unlink(missing_ok=True)
    return bin_dir


def descriptor_path(board: str = "n150") -> Path:
    """Path of the packaged cluster-descriptor YAML for ``board`` (a key of :data:`BOARDS`)."""
    try:
        return PACKAGE_DIR / BOARDS[board]
    except KeyError:
        raise ValueError(
            f"unknown mock board {board!r}; supported boards: {', '.join(sorted(BOARDS))}"
        ) from None


def _default_cache_dir() -> Path:
    try:
        user = str(os.getuid())
    except AttributeError:  # not POSIX
        user = os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"tt_models_mock_cache-{user}"


def environment(board: str = "n150", cache_dir: str | None = None) -> dict[str, str]:
    """Environment variables to set before opening a mock device of ``board``.

    Returns ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` (the packaged YAML for the board),
    ``TT_METAL_CACHE`` (``cache_dir``, default a per-user dir in the temp dir such as
    ``/tmp/tt_models_mock_cache-<uid>``, so stub binaries never land in ``~/.cache``; it is
    safe to keep between runs, the stand-in's fake version keys its entries) and
    ``TT_METAL_LOGS_PATH`` (``<cache_dir>/logs``: otherwise every device open writes
    ``generated/fabric`` and ``generated/watcher`` into the current directory).
    No directory is created here.

    Raises:
        ValueError: for a board not in :data:`BOARDS`.
    """
    desc = descriptor_path(board)
    cache = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    cache = cache.resolve()
    return {
        MOCK_ENV_VAR: str(desc),
        CACHE_ENV_VAR: str(cache),
        LOGS_ENV_VAR: str(cache / "logs"),
    }


def activate(board: str = "n150", cache_dir: str | None = None) -> None:
    """Install the stand-in if needed and put :func:`environment` into ``os.environ``.

    Must be called before the first ttnn device open (or device-count query) of the
    process; ``import ttnn`` may come before.  The mock cluster is created once per process
    at that first use and is kept until exit: after an n150 device was opened and closed,
    switching to "n300" and opening a 1x2 mesh fails with ``TT_FATAL ... Requested mesh
    shape MeshShape([1, 2]) requires 2 devices, but only 1 devices are available``.
    Run each board in its own process.
    """
    env = environment(board, cache_dir)
    if not is_installed():
        install()
    Path(env[CACHE_ENV_VAR]).mkdir(mode=0o700, parents=True, exist_ok=True)
    Path(env[LOGS_ENV_VAR]).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ.update(env)
