"""ttnn's value types (dtypes, layouts, memory and core descriptions, configs), for the host backend.

Names, fields and constructor keywords follow ttnn 0.81.1 so that model code builds them unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

TILE_SIZE = 32

__all__ = [
    "TILE_SIZE",
    "DataType",
    "bfloat16",
    "float32",
    "uint32",
    "bfloat8_b",
    "bfloat4_b",
    "uint8",
    "uint16",
    "int32",
    "Layout",
    "ROW_MAJOR_LAYOUT",
    "TILE_LAYOUT",
    "StorageType",
    "BufferType",
    "TensorMemoryLayout",
    "ShardOrientation",
    "ShardStrategy",
    "MathFidelity",
    "ThrottleLevel",
    "Shape",
    "CoreCoord",
    "CoreRange",
    "CoreRangeSet",
    "CoreGrid",
    "ShardSpec",
    "MemoryConfig",
    "DRAM_MEMORY_CONFIG",
    "L1_MEMORY_CONFIG",
    "L1_HEIGHT_SHARDED_MEMORY_CONFIG",
    "L1_WIDTH_SHARDED_MEMORY_CONFIG",
    "L1_BLOCK_SHARDED_MEMORY_CONFIG",
    "WormholeComputeKernelConfig",
    "SDPAProgramConfig",
    "MeshShape",
]


class DataType(enum.Enum):
    BFLOAT16 = 0
    FLOAT32 = 1
    UINT32 = 2
    BFLOAT8_B = 3
    BFLOAT4_B = 4
    UINT8 = 5
    UINT16 = 6
    INT32 = 7


bfloat16 = DataType.BFLOAT16
float32 = DataType.FLOAT32
uint32 = DataType.UINT32
bfloat8_b = DataType.BFLOAT8_B
bfloat4_b = DataType.BFLOAT4_B
uint8 = DataType.UINT8
uint16 = DataType.UINT16
int32 = DataType.INT32

FLOAT_DTYPES = frozenset({DataType.BFLOAT16, DataType.FLOAT32, DataType.BFLOAT8_B, DataType.BFLOAT4_B})
BLOCK_FLOAT_DTYPES = frozenset({DataType.BFLOAT8_B, DataType.BFLOAT4_B})


class Layout(enum.Enum):
    ROW_MAJOR = 0
    TILE = 1


ROW_MAJOR_LAYOUT = Layout.ROW_MAJOR
TILE_LAYOUT = Layout.TILE


class StorageType(enum.Enum):
    HOST = 0
    DEVICE = 1


class BufferType(enum.Enum):
    DRAM = 0
    L1 = 1
    L1_SMALL = 2
    TRACE = 3


class TensorMemoryLayout(enum.Enum):
    INTERLEAVED = 0
    HEIGHT_SHARDED = 2
    WIDTH_SHARDED = 3
    BLOCK_SHARDED = 4


class ShardOrientation(enum.Enum):
    ROW_MAJOR = 0
    COL_MAJOR = 1


class ShardStrategy(enum.Enum):
    HEIGHT = 0
    WIDTH = 1
    BLOCK = 2


class MathFidelity(enum.Enum):
    LoFi = 0
    HiFi2 = 2
    HiFi3 = 3
    HiFi4 = 4
    Invalid = 0xFF


class ThrottleLevel(enum.Enum):
    NO_THROTTLE = 0
    LEVEL_1 = 1
    LEVEL_2 = 2
    LEVEL_3 = 3
    LEVEL_4 = 4
    LEVEL_5 = 5


class Shape(tuple):
    """A tensor shape: a tuple of ints that also answers ``rank`` as ``ttnn.Shape`` does."""

    def __new__(cls, dims: Iterable[int]) -> "Shape":
        return super().__new__(cls, (int(d) for d in dims))

    @property
    def rank(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return f"Shape({list(self)})"


@dataclass(frozen=True)
class CoreCoord:
    x: int
    y: int


@dataclass(frozen=True)
class CoreRange:
    start: CoreCoord
    end: CoreCoord

    def num_cores(self) -> int:
        return (self.end.x - self.start.x + 1) * (self.end.y - self.start.y + 1)

    def cores(self) -> Iterator[CoreCoord]:
        for y in range(self.start.y, self.end.y + 1):
            for x in range(self.start.x, self.end.x + 1):
                yield CoreCoord(x, y)


class CoreRangeSet:
    def __init__(self, core_ranges: Iterable[CoreRange]) -> None:
        self.ranges_: tuple[CoreRange, ...] = tuple(core_ranges)
        # Built once: every sharded op's checks read them.
        self._cores: frozenset[CoreCoord] | None = None
        self._box: CoreRange | None = None

    def ranges(self) -> list[CoreRange]:
        return list(self.ranges_)

    def num_cores(self) -> int:
        return len(self.core_set())

    def core_set(self) -> frozenset[CoreCoord]:
        if self._cores is None:
            self._cores = frozenset(c for r in self.ranges_ for c in r.cores())
        return self._cores

    def intersects(self, other: "CoreRangeSet") -> bool:
        return bool(self.core_set() & other.core_set())

    def bounding_box(self) -> CoreRange:
        if self._box is None:
            cores = self.core_set()
            self._box = CoreRange(CoreCoord(min(c.x for c in cores), min(c.y for c in cores)),
                                  CoreCoord(max(c.x for c in cores), max(c.y for c in cores)))
        return self._box

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CoreRangeSet) and self.core_set() == other.core_set()

    def __repr__(self) -> str:
        return f"CoreRangeSet({list(self.ranges_)})"


@dataclass(frozen=True)
class CoreGrid:
    y: int
    x: int

    def __init__(self, *, x: int, y: int) -> None:
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)

    @property
    def num_cores(self) -> int:
        return self.x * self.y


@dataclass(frozen=True)
class ShardSpec:
    grid: CoreRangeSet
    shape: list[int]
    orientation: ShardOrientation = ShardOrientation.ROW_MAJOR

    def __init__(self, grid: CoreRangeSet, shard_shape: Sequence[int], shard_orientation: ShardOrientation) -> None:
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "shape", [int(s) for s in shard_shape])
        object.__setattr__(self, "orientation", shard_orientation)

    def num_cores(self) -> int:
        return self.grid.num_cores()


@dataclass(frozen=True)
class MemoryConfig:
    memory_layout: TensorMemoryLayout = TensorMemoryLayout.INTERLEAVED
    buffer_type: BufferType = BufferType.DRAM
    shard_spec: ShardSpec | None = None

    def is_sharded(self) -> bool:
        return self.memory_layout != TensorMemoryLayout.INTERLEAVED

    @property
    def interleaved(self) -> bool:
        return not self.is_sharded()


DRAM_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.INTERLEAVED, BufferType.DRAM)
L1_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.INTERLEAVED, BufferType.L1)
L1_HEIGHT_SHARDED_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.HEIGHT_SHARDED, BufferType.L1)
L1_WIDTH_SHARDED_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.WIDTH_SHARDED, BufferType.L1)
L1_BLOCK_SHARDED_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.BLOCK_SHARDED, BufferType.L1)


@dataclass
class WormholeComputeKernelConfig:
    """Math fidelity and accumulation settings. The host computes in fp32 whatever they say;
    ``fp32_dest_acc_en`` is honoured where it changes stored values (cache updates)."""

    math_fidelity: MathFidelity = MathFidelity.Invalid
    math_approx_mode: bool = True
    fp32_dest_acc_en: bool = False
    packer_l1_acc: bool = False
    dst_full_sync_en: bool = False

    def __init__(self, *, math_fidelity: MathFidelity = MathFidelity.Invalid, math_approx_mode: bool = True,
                 fp32_dest_acc_en: bool = False, packer_l1_acc: bool = False, dst_full_sync_en: bool = False,
                 throttle_level: ThrottleLevel = ThrottleLevel.NO_THROTTLE) -> None:
        self.math_fidelity = math_fidelity
        self.math_approx_mode = math_approx_mode
        self.fp32_dest_acc_en = fp32_dest_acc_en
        self.packer_l1_acc = packer_l1_acc
        self.dst_full_sync_en = dst_full_sync_en


@dataclass
class SDPAProgramConfig:
    compute_with_storage_grid_size: CoreCoord
    q_chunk_size: int
    k_chunk_size: int
    sub_core_grids: CoreRangeSet | None = None
    exp_approx_mode: bool | None = None
    max_cores_per_head_batch: int = 16
    max_k_splits: int = 1
    matmul_math_fidelity: MathFidelity | None = None
    segmented_accumulation: bool = False

    def __init__(self, *, compute_with_storage_grid_size: CoreCoord, sub_core_grids: CoreRangeSet | None = None,
                 q_chunk_size: int, k_chunk_size: int, exp_approx_mode: bool | None = None,
                 max_cores_per_head_batch: int = 16, max_k_splits: int = 1,
                 matmul_math_fidelity: MathFidelity | None = None, segmented_accumulation: bool = False) -> None:
        self.compute_with_storage_grid_size = compute_with_storage_grid_size
        self.sub_core_grids = sub_core_grids
        self.q_chunk_size = q_chunk_size
        self.k_chunk_size = k_chunk_size
        self.exp_approx_mode = exp_approx_mode
        self.max_cores_per_head_batch = max_cores_per_head_batch
        self.max_k_splits = max_k_splits
        self.matmul_math_fidelity = matmul_math_fidelity
        self.segmented_accumulation = segmented_accumulation


@dataclass(frozen=True)
class MeshShape:
    rows: int
    cols: int

    def __init__(self, s0: int, s1: int) -> None:
        object.__setattr__(self, "rows", int(s0))
        object.__setattr__(self, "cols", int(s1))

    def mesh_size(self) -> int:
        return self.rows * self.cols

    def __iter__(self) -> Iterator[int]:
        return iter((self.rows, self.cols))
