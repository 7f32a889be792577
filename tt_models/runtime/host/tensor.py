"""The host backend's tensor: a torch tensor holding the logical values, plus ttnn's metadata."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from . import bfp
from .errors import TTFatal
from .types import (
    BLOCK_FLOAT_DTYPES, DRAM_MEMORY_CONFIG, FLOAT_DTYPES, TILE_SIZE, DataType, Layout, MemoryConfig, Shape,
    StorageType,
)

if TYPE_CHECKING:
    from .device import MeshDevice

# How each dtype's values are held on the host (float types in fp32, already rounded to the dtype).
STORAGE_DTYPE = {
    DataType.BFLOAT16: torch.float32,
    DataType.FLOAT32: torch.float32,
    DataType.BFLOAT8_B: torch.float32,
    DataType.BFLOAT4_B: torch.float32,
    DataType.UINT32: torch.int64,
    DataType.INT32: torch.int32,
    DataType.UINT16: torch.int32,
    DataType.UINT8: torch.int32,
}
# What ``to_torch`` returns for each dtype (as the real ttnn 0.81.1 does).
TORCH_DTYPE = {
    DataType.BFLOAT16: torch.bfloat16,
    DataType.FLOAT32: torch.float32,
    DataType.BFLOAT8_B: torch.float32,
    DataType.BFLOAT4_B: torch.float32,
    DataType.UINT32: torch.uint32,
    DataType.INT32: torch.int32,
    DataType.UINT16: torch.uint16,
    DataType.UINT8: torch.uint8,
}


def tile_padded(shape: tuple[int, ...]) -> Shape:
    """The shape with its last two dims rounded up to whole 32x32 tiles."""
    dims = list(shape)
    for i in (-1, -2):
        if len(dims) >= -i:
            dims[i] = -(-dims[i] // TILE_SIZE) * TILE_SIZE
    return _shape(dims)


def _shape(dims: tuple[int, ...] | list[int]) -> Shape:
    """A Shape of dims that are ints already (a torch.Size): every op reads shapes, so skip Shape's conversions."""
    return tuple.__new__(Shape, dims)


def quantize(values: torch.Tensor, dtype: DataType, *, device_packer: bool = False) -> torch.Tensor:
    """Round float values to what ``dtype`` can hold, in the host storage dtype.

    Block-float dtypes use the host packer (``from_torch``) unless ``device_packer`` is set (a value
    produced by a device op).
    """
    if dtype == DataType.FLOAT32:
        return values.to(torch.float32)
    if dtype == DataType.BFLOAT16:
        return bfp.round_to_bfloat16(values.to(torch.float32))
    if dtype in BLOCK_FLOAT_DTYPES:
        if not values.any():  # zeros (a KV pool being allocated) pack to zeros: skip the packer's passes
            return torch.zeros(values.shape, dtype=torch.float32)
        bits = bfp.MANTISSA_BITS[dtype.name.lower()]
        pack = bfp.pack_device if device_packer else bfp.pack_host
        return pack(values.to(torch.float32), bits)
    return values.to(STORAGE_DTYPE[dtype])


class Tensor:
    """A ttnn tensor of the host backend.

    ``value`` holds the logical (unpadded) values. Tile padding reads as zeros, as after ``from_torch``;
    device ops leave it unspecified on hardware, and nothing in the models may depend on it.
    """

    __slots__ = ("value", "dtype", "layout", "_memory_config", "_device")

    def __init__(self, value: torch.Tensor, dtype: DataType, layout: Layout,
                 device: "MeshDevice | None" = None, memory_config: MemoryConfig | None = None) -> None:
        self.value = value
        self.dtype = dtype
        self.layout = layout
        self._device = device
        self._memory_config = memory_config if device is not None else None
        if device is not None and memory_config is None:
            self._memory_config = DRAM_MEMORY_CONFIG

    # --- ttnn.Tensor's introspection API -------------------------------------------------------
    @property
    def shape(self) -> Shape:
        return _shape(self.value.shape)

    @property
    def padded_shape(self) -> Shape:
        return tile_padded(self.value.shape) if self.layout == Layout.TILE else _shape(self.value.shape)

    def device(self) -> "MeshDevice | None":
        return self._device

    def memory_config(self) -> MemoryConfig:
        if self._device is None:
            raise TTFatal("Tensor.memory_config: the tensor is on the host, it has no memory config")
        return self._memory_config

    def is_sharded(self) -> bool:
        return self._device is not None and self._memory_config.is_sharded()

    def storage_type(self) -> StorageType:
        return StorageType.DEVICE if self._device is not None else StorageType.HOST

    def get_dtype(self) -> DataType:
        return self.dtype

    def get_layout(self) -> Layout:
        return self.layout

    def is_allocated(self) -> bool:
        return self.value is not None

    def volume(self) -> int:
        return self.value.numel()

    def logical_volume(self) -> int:
        return self.value.numel()

    def deallocate(self, force: bool = False) -> None:
        self.value = None

    def cpu(self, blocking: bool = True) -> "Tensor":
        return Tensor(self.value.clone(), self.dtype, self.layout)

    def to_torch(self) -> torch.Tensor:
        """A copy of the values (the device buffer stays private, as on hardware)."""
        return self.value.to(TORCH_DTYPE[self.dtype], copy=True)

    def __getitem__(self, key: object) -> "Tensor":
        """Torch-style basic indexing (ints, slices with positive steps, ``...``), as ``ttnn.Tensor`` offers."""
        keys = key if isinstance(key, tuple) else (key,)
        for k in keys:
            if not (isinstance(k, int) or k is Ellipsis or (isinstance(k, slice) and (k.step or 1) > 0)):
                raise TypeError(f"ttnn.Tensor indexing supports ints, slices with positive steps and ..., not {k!r}")
        return Tensor(self.value[key].clone(), self.dtype, self.layout, self._device, self._memory_config)

    def __repr__(self) -> str:
        place = "host" if self._device is None else "device"
        return f"ttnn.Tensor(shape={list(self.shape)}, dtype={self.dtype.name}, layout={self.layout.name}, {place})"

    # --- helpers for the op implementations (not part of ttnn's API) ---------------------------
    def float(self) -> torch.Tensor:
        """The values in fp32 for computing."""
        return self.value if self.value.dtype == torch.float32 else self.value.to(torch.float32)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def like(self, values: torch.Tensor, *, dtype: DataType | None = None, layout: Layout | None = None,
             memory_config: MemoryConfig | None = None) -> "Tensor":
        """A new tensor on this tensor's device holding ``values`` rounded (device packer) to ``dtype``."""
        dtype = self.dtype if dtype is None else dtype
        layout = self.layout if layout is None else layout
        if self._device is not None and memory_config is None:
            memory_config = DRAM_MEMORY_CONFIG
        return Tensor(quantize(values, dtype, device_packer=True), dtype, layout, self._device, memory_config)

    def rearranged(self, values: torch.Tensor, *, memory_config: MemoryConfig | None = None) -> "Tensor":
        """What ``like`` gives for ``values`` that are this tensor's own values moved (reshaped, sliced, permuted,
        concatenated with tensors of its dtype, zero-padded). Only block floats are re-packed (values that land in a
        new 16-value block share its exponent): every other dtype holds them exactly already, and rounding a
        bfloat16 value to bfloat16 again changes no bit (NaNs included), so that pass is skipped."""
        if self.dtype in BLOCK_FLOAT_DTYPES:
            return self.like(values, memory_config=memory_config)
        if values._base is not None or values is self.value:
            values = values.clone()  # a view: the new tensor owns its buffer, as like's rounding gives it one
        if self._device is not None and memory_config is None:
            memory_config = DRAM_MEMORY_CONFIG
        return Tensor(values, self.dtype, self.layout, self._device, memory_config)

    def moved(self, *, layout: Layout | None = None, memory_config: MemoryConfig | None = None) -> "Tensor":
        """A copy with the same values and dtype in another layout or memory config (no re-packing)."""
        return Tensor(self.value.clone(), self.dtype, self.layout if layout is None else layout, self._device,
                      memory_config or self._memory_config)
