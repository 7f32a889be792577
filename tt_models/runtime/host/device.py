"""Host "devices": stand-ins for a Tenstorrent chip or mesh, so model code can place tensors on them."""

from __future__ import annotations

import enum
import itertools
from typing import Sequence

from .errors import check
from .types import CoreCoord, MeshShape

_ids = itertools.count()

__all__ = [
    "Arch",
    "MeshDevice",
    "open_device",
    "close_device",
    "open_mesh_device",
    "close_mesh_device",
    "get_num_devices",
]


class Arch(enum.Enum):
    GRAYSKULL = 1
    WORMHOLE_B0 = 2
    BLACKHOLE = 3


class MeshDevice:
    """A host-backend device: a mesh of ``shape`` chips (1x1 for a single chip).

    A tensor on a mesh of several chips holds one value per chip (``mesh.py``). Its grid and arch
    describe the board it stands in for, so model code sizes its program configs as on hardware.
    """

    def __init__(self, shape: MeshShape, arch: Arch = Arch.WORMHOLE_B0, grid: CoreCoord = CoreCoord(8, 8)) -> None:
        self.shape = shape
        self._arch = arch
        self._grid = grid
        self._id = next(_ids)
        self._open = True
        self._program_cache_entries = 0

    def arch(self) -> Arch:
        return self._arch

    def id(self) -> int:
        return self._id

    def compute_with_storage_grid_size(self) -> CoreCoord:
        return self._grid

    def dram_grid_size(self) -> CoreCoord:
        """The DRAM banks as one row: 12 on Wormhole, 8 on a Blackhole p150."""
        return CoreCoord(8 if self._arch == Arch.BLACKHOLE else 12, 1)

    def get_num_devices(self) -> int:
        return self.shape.mesh_size()

    def get_device_ids(self) -> list[int]:
        return list(range(self.get_num_devices()))

    def create_submeshes(self, submesh_shape: MeshShape) -> list["MeshDevice"]:
        count = self.shape.mesh_size() // submesh_shape.mesh_size()
        check(count * submesh_shape.mesh_size() == self.shape.mesh_size(), "create_submeshes",
              f"submesh shape {tuple(submesh_shape)} does not tile the mesh {tuple(self.shape)}")
        return [MeshDevice(submesh_shape, self._arch, self._grid) for _ in range(count)]

    def enable_program_cache(self) -> None:
        pass

    def disable_and_clear_program_cache(self) -> None:
        pass

    def num_program_cache_entries(self) -> int:
        return self._program_cache_entries

    def __repr__(self) -> str:
        return f"HostMeshDevice(id={self._id}, shape={tuple(self.shape)}, arch={self._arch.name})"


def open_device(*, device_id: int = 0, l1_small_size: int = 0, trace_region_size: int = 0,
                dispatch_core_config: object = None, worker_l1_size: int = 0) -> MeshDevice:
    return MeshDevice(MeshShape(1, 1))


def close_device(device: MeshDevice) -> None:
    device._open = False


def open_mesh_device(mesh_shape: MeshShape | None = None, l1_small_size: int = 0, trace_region_size: int = 0,
                     num_command_queues: int = 1, dispatch_core_config: object = None, offset: object = None,
                     physical_device_ids: Sequence[int] = [], worker_l1_size: int = 0) -> MeshDevice:
    return MeshDevice(mesh_shape or MeshShape(1, 1))


def close_mesh_device(mesh_device: MeshDevice) -> None:
    mesh_device._open = False


def get_num_devices() -> list[int]:
    """The ids of the chips present: the host backend stands in for one chip."""
    return [0]
