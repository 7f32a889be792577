"""CTranslate2's ``model.bin``, whatever model it holds, read with ``struct``/numpy only (no ctranslate2); what the
variables of a Whisper spec mean is ``whisper_ct2``'s.

The format: a little-endian u32 binary version (4 to 6), the spec name and u32 revision (version >= 2), a u32
variable count, then per variable its name, u8 rank, u32 dims, u8 dtype id, u32 byte count and the raw data, then
u32 alias count and (alias, target) name pairs. Strings are a u16 length (counting a trailing NUL) and the bytes. A
checkpoint split into ``model.bin.part1..N`` is read as one stream.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

SUPPORTED_BINARY_VERSIONS = range(4, 7)
# DataType ids of CTranslate2's model.bin (include/ctranslate2/types.h order).
_FLOAT32, _INT8, _INT16, _INT32, _FLOAT16, _BFLOAT16 = range(6)
_NUMPY_DTYPES = {_FLOAT32: np.float32, _INT8: np.int8, _INT16: np.int16, _INT32: np.int32,
                 _FLOAT16: np.float16, _BFLOAT16: np.uint16}


def is_ct2_directory(directory: Path) -> bool:
    """Whether ``directory`` holds a CTranslate2 model (a model.bin, or parts, whose header reads as CT2)."""
    if not ((directory / "model.bin").is_file() or (directory / "model.bin.part1").is_file()):
        return False
    first = directory / "model.bin" if (directory / "model.bin").is_file() else directory / "model.bin.part1"
    try:
        with first.open("rb") as handle:
            return _read_header(_Stream([handle], [first]))[0] in SUPPORTED_BINARY_VERSIONS
    except (ValueError, UnicodeDecodeError):
        return False


@dataclass(frozen=True)
class CT2Model:
    """The contents of a CTranslate2 ``model.bin``: variables keep their stored dtype (bfloat16 as uint16)."""

    binary_version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]  # alias -> variable name
    dtype_ids: dict[str, int]

    def get(self, name: str) -> np.ndarray:
        return self.variables[self.aliases.get(name, name)]

    def __contains__(self, name: str) -> bool:
        return self.aliases.get(name, name) in self.variables

    def dense(self, name: str) -> np.ndarray:
        """Variable ``name`` as float32: bfloat16 widened, int8/int16 weights divided by their ``weight_scale``."""
        target = self.aliases.get(name, name)
        value, dtype_id = self.variables[target], self.dtype_ids[target]
        if dtype_id == _BFLOAT16:
            return (value.astype(np.uint32) << 16).view(np.float32)
        if dtype_id in (_INT8, _INT16, _INT32):
            scale_name = target + "_scale"
            if scale_name not in self.variables:
                raise ValueError(f"{target} is stored as an integer dtype (id {dtype_id}) with no {scale_name}")
            scale = self.dense(scale_name)
            scale = scale.reshape(scale.shape + (1,) * (value.ndim - scale.ndim))
            return value.astype(np.float32) / scale
        return value.astype(np.float32)


def read_ct2_model(files: Path | Iterable[Path]) -> CT2Model:
    """Parse ``model.bin`` (or its parts, as one stream). Raises ValueError on a malformed or truncated file."""
    paths = [Path(files)] if isinstance(files, (str, Path)) else [Path(f) for f in files]
    with _open_all(paths) as handles:
        stream = _Stream(handles, paths)
        version, spec, revision = _read_header(stream)
        if version not in SUPPORTED_BINARY_VERSIONS:
            raise ValueError(f"{paths[0]}: CTranslate2 binary version {version} is not supported "
                             f"(only {list(SUPPORTED_BINARY_VERSIONS)})")
        variables, dtype_ids = {}, {}
        for _ in range(stream.unpack("I")):
            name = stream.string()
            rank = stream.unpack("B")
            shape = tuple(stream.unpack("I") for _ in range(rank))
            dtype_id, num_bytes = stream.unpack("B"), stream.unpack("I")
            if dtype_id not in _NUMPY_DTYPES:
                raise ValueError(f"{paths[0]}: variable {name!r} has unknown dtype id {dtype_id}")
            dtype = np.dtype(_NUMPY_DTYPES[dtype_id])
            if num_bytes != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
                raise ValueError(f"{paths[0]}: variable {name!r} of shape {shape} has {num_bytes} bytes")
            variables[name] = np.frombuffer(stream.read(num_bytes), dtype=dtype).reshape(shape)
            dtype_ids[name] = dtype_id
        aliases = {}
        for _ in range(stream.unpack("I")):
            alias = stream.string()
            aliases[alias] = stream.string()
        if stream.read_rest():
            raise ValueError(f"{paths}: unexpected bytes after the aliases (a wrong or extra part?)")
    return CT2Model(version, spec, revision, variables, aliases, dtype_ids)


class _Stream:
    """Sequential reads across the handles of several files, as if they were one file."""

    def __init__(self, handles: list[BinaryIO], paths: list[Path]):
        self._handles, self._paths, self._index = handles, paths, 0

    def read(self, size: int) -> bytes:
        chunks = []
        while size > 0:
            chunk = self._handles[self._index].read(size)
            if not chunk:
                if self._index + 1 == len(self._handles):
                    names = [p.name for p in self._paths]
                    raise ValueError(f"CTranslate2 model {names} ends early: truncated, or a split part is missing")
                self._index += 1
                continue
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def read_rest(self) -> bytes:
        return b"".join(handle.read() for handle in self._handles[self._index:])

    def unpack(self, fmt: str) -> int:
        fmt = "<" + fmt
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.read(self.unpack("H")).rstrip(b"\0").decode("utf-8")


def _read_header(stream: _Stream) -> tuple[int, str, int]:
    version = stream.unpack("I")
    if version not in SUPPORTED_BINARY_VERSIONS:
        return version, "", 0
    return version, stream.string(), stream.unpack("I")


@contextmanager
def _open_all(paths: list[Path]) -> Iterator[list[BinaryIO]]:
    handles: list[BinaryIO] = []
    try:
        for path in paths:
            handles.append(path.open("rb"))
        yield handles
    finally:
        for handle in handles:
            handle.close()
