"""tt_transformers' decode layout: DRAM width-sharded weights, width-sharded L1 activations and their program configs.

Decode runs one 32-row tile of users, so its matmuls are bound by reading the weights. tt_transformers
(``models/tt_transformers/tt/model_config.py``) therefore stores each decode weight width-sharded over the DRAM
banks and runs ``MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig`` (one worker per bank reads its own
shard) on an activation width-sharded in L1 over a grid whose core count divides K; the RMSNorms run sharded
(``LayerNormShardedMultiCoreProgramConfig``) on those grids and the residual stays width-sharded in L1 between
layers. Prefill reads the same weights through a 2D multicast program config, so one weight copy serves both.

Everything here is sized from the model's dims and the device (worker grid, DRAM banks); grids stay within 8x8 as
tt_transformers sizes them on Wormhole and Blackhole alike. :meth:`DramShardedMatmul.check` states the rules a
config must meet, some of which ttnn 0.81.1 does not check itself (a too small ``per_core_N`` runs silently).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tt_models.runtime import ttnn
from tt_models.tt.tensor_parallel import HeadSplit

TILE = 32
MAX_GRID = 8  # rows and columns of every decode grid, as tt_transformers' find_grid / find_grid_k_n
# LM head columns per matmul, as tt_transformers caps them: per core of its grid on Wormhole (128256 / 4 columns fit
# 48 cores), per device on Blackhole (its figure is not per core yet).
LM_HEAD_COLUMNS_PER_CORE = 668
LM_HEAD_COLUMNS_BLACKHOLE = 128256 // 8
# L1 one DRAM-reading core of the LM head matmul may give its weight (triple-buffered blocks) and output (two
# buffers): what tt_transformers' cap uses at its dtypes (Llama 3.1 8B on an n150: 112 tiles per bank, blocks of 2
# tiles, bfloat8_b weights and output). Its cap alone overflows L1 with bfloat16 weights or float32 logits.
LM_HEAD_L1_PER_BANK = 112 * (3 * 2 + 2) * 1088


def largest_divisor(n: int, limit: int = 8) -> int:
    """The largest divisor of ``n`` not above ``limit`` (block widths must divide the tiles they walk)."""
    return next(d for d in range(min(n, limit), 0, -1) if n % d == 0)


def _grid_of(cores: int) -> Any:
    """``cores`` as a rectangle of at most 8x8, fewest rows first; None if it has none."""
    for rows in range(1, MAX_GRID + 1):
        if cores % rows == 0 and cores // rows <= MAX_GRID:
            return ttnn.CoreGrid(x=cores // rows, y=rows)
    return None


def grid_for_k(k_tiles: int) -> Any:
    """The grid a width-sharded activation of ``k_tiles`` uses: the core count dividing it closest to 32
    (tt_transformers' ``find_grid``, which ``dram_shard_core_grid_for_k`` wraps)."""
    for cores in sorted((c for c in range(1, MAX_GRID ** 2 + 1) if k_tiles % c == 0), key=lambda c: abs(c - 32)):
        grid = _grid_of(cores)
        if grid is not None:
            return grid
    raise ValueError(f"no grid of at most {MAX_GRID}x{MAX_GRID} cores divides {k_tiles} tiles")


def grid_for_k_and_n(k_tiles: int, n_tiles: int) -> Any:
    """The largest grid whose core count divides both ``k_tiles`` and ``n_tiles`` (tt_transformers'
    ``find_grid_k_n``, used for the MLP matmuls)."""
    for cores in range(MAX_GRID ** 2, 0, -1):
        if k_tiles % cores == 0 and n_tiles % cores == 0:
            grid = _grid_of(cores)
            if grid is not None:
                return grid
    raise ValueError(f"no grid of at most {MAX_GRID}x{MAX_GRID} cores divides {k_tiles} and {n_tiles} tiles")


def lm_head_grid(dim: int) -> Any:
    """tt_transformers' LM head grid: the most rows (then columns) of at most 8 such that each core's share of
    ``dim`` is whole tiles."""
    for cols in range(MAX_GRID, 0, -1):
        for rows in range(MAX_GRID, 0, -1):
            if dim % (TILE * rows * cols) == 0:
                return ttnn.CoreGrid(x=cols, y=rows)
    raise ValueError(f"dim {dim} is not a multiple of {TILE}")


def user_cores(device: Any, users: int = TILE) -> Any:
    """The cores decode's per-user tensors (Q/K/V heads, rotary cos/sin) are height-sharded over, one user each: the
    first ``users`` of an 8-wide grid, row by row (an 8x4 rectangle for 32 users on Wormhole and Blackhole alike,
    as tt_transformers shards them; Blackhole's 13-wide rows would make ``nlp_concat_heads_decode`` fail)."""
    grid = device.compute_with_storage_grid_size()
    return ttnn.num_cores_to_corerangeset(users, ttnn.CoreCoord(min(MAX_GRID, grid.x), grid.y), row_wise=True)


def reshard(x: Any, memory_config: Any) -> Any:
    """``x`` in ``memory_config`` (itself when it already is: a decode tensor often is)."""
    return x if x.memory_config() == memory_config else ttnn.to_memory_config(x, memory_config)


def _rectangle(grid: Any) -> Any:
    return ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(grid.x - 1, grid.y - 1))})


@dataclass(frozen=True)
class Board:
    """What the configs depend on in a device: its worker grid, DRAM banks and architecture."""

    grid_x: int
    grid_y: int
    dram_banks: int  # 12 on Wormhole, 8 on a p150, 7 on a p100
    wormhole: bool

    @classmethod
    def of(cls, device: Any) -> "Board":
        grid, dram = device.compute_with_storage_grid_size(), device.dram_grid_size()
        if dram.y != 1:
            raise ValueError(f"DRAM grid {dram.x}x{dram.y}: DRAM sharding assumes one row of banks")
        return cls(grid.x, grid.y, dram.x, device.arch() == ttnn.Arch.WORMHOLE_B0)

    @property
    def prefill_width(self) -> int:
        """Columns of the prefill matmul grid (tt_transformers' ``dram_shard_grid_width``): 8 on Wormhole, one per
        bank on Blackhole (where other widths silently gave wrong results on a p100)."""
        return MAX_GRID if self.wormhole else self.dram_banks

    def lm_head_columns(self, cores: int, in0_block_w: int, weight_tile: int, output_tile: int) -> int:
        """Output columns of one LM head matmul (whole tiles) on ``cores``, given its K block and the bytes of a
        weight and an output tile: tt_transformers' cap, lowered to what fits :data:`LM_HEAD_L1_PER_BANK`."""
        cap = LM_HEAD_COLUMNS_PER_CORE * cores if self.wormhole else LM_HEAD_COLUMNS_BLACKHOLE
        per_bank = LM_HEAD_L1_PER_BANK // (3 * in0_block_w * weight_tile + 2 * output_tile)
        return min(cap // TILE, per_bank * self.dram_banks) * TILE


@dataclass(frozen=True)
class ShardedNorm:
    """A norm run width-sharded: its input and output memory config and its program config."""

    memory_config: Any
    program_config: Any

    @classmethod
    def on(cls, grid: Any, dim: int, rows: int = TILE) -> "ShardedNorm":
        block_w = dim // grid.num_cores // TILE
        return cls(ttnn.create_sharded_memory_config((rows, dim // grid.num_cores), grid, ttnn.ShardStrategy.WIDTH,
                                                     ttnn.ShardOrientation.ROW_MAJOR,
                                                     use_height_and_width_as_shard_shape=True),
                   ttnn.LayerNormShardedMultiCoreProgramConfig(
                       compute_with_storage_grid_size=ttnn.CoreCoord(grid.x, grid.y),
                       subblock_w=largest_divisor(block_w, 4), block_h=rows // TILE, block_w=block_w, inplace=False))


@dataclass(frozen=True)
class DramShardedMatmul:
    """One decode matmul ``[rows, k] @ [k, n]``: the activation width-sharded over ``cores`` (the first cores of
    ``input_grid``, row by row), the weight width-sharded over the DRAM banks."""

    k: int
    n: int
    input_grid: Any  # a CoreRangeSet
    cores: int
    board: Board
    rows: int = TILE

    @classmethod
    def on(cls, grid: Any, k: int, n: int, board: Board) -> "DramShardedMatmul":
        return cls(k, n, _rectangle(grid), grid.num_cores, board)

    @property
    def k_tiles(self) -> int:
        return self.k // TILE

    @property
    def n_tiles(self) -> int:
        return -(-self.n // TILE)

    def input_memory_config(self) -> Any:
        return ttnn.create_sharded_memory_config((self.rows, self.k // self.cores), self.input_grid,
                                                 ttnn.ShardStrategy.WIDTH, ttnn.ShardOrientation.ROW_MAJOR,
                                                 use_height_and_width_as_shard_shape=True)

    def weight_memory_config(self) -> Any:
        """``[k, n]`` width-sharded over the DRAM banks, ``n`` padded to whole tiles per bank."""
        banks = self.board.dram_banks
        shard = -(-self.n_tiles // banks) * TILE
        grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(banks - 1, 0))})
        return ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.DRAM,
                                 ttnn.ShardSpec(grid, (self.k, shard), ttnn.ShardOrientation.ROW_MAJOR))

    def decode_program_config(self, activation: Any = None) -> Any:
        """tt_transformers' ``dram_matmul_config``."""
        return ttnn.MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig(
            in0_block_w=largest_divisor(self.k_tiles // self.cores), per_core_M=-(-self.rows // TILE),
            per_core_N=-(-self.n_tiles // self.cores), fused_activation=activation)

    def prefill_program_config(self, rows: int, activation: Any = None) -> Any:
        """A 2D multicast config reading the DRAM-sharded weight for ``rows`` interleaved rows (tt_transformers'
        ``matmul_config`` with ``per_core_N`` over the DRAM shard grid width). Where tt_transformers reshapes
        long prompts into 1024-row batches, the output here is computed in blocks of at most 32 tiles, which keeps
        any prompt length within L1."""
        grid_y = largest_divisor(self.k_tiles)
        per_core_m = -(-rows // (TILE * grid_y))
        per_core_n = -(-self.n_tiles // self.board.prefill_width)
        block_w = per_core_n if per_core_n <= MAX_GRID else largest_divisor(per_core_n)
        return ttnn.MatmulMultiCoreReuseMultiCastProgramConfig(
            compute_with_storage_grid_size=ttnn.CoreCoord(MAX_GRID, grid_y),
            in0_block_w=largest_divisor(self.k_tiles // grid_y), out_subblock_h=1,
            out_subblock_w=largest_divisor(block_w, 4), out_block_h=largest_divisor(per_core_m, 32 // block_w),
            out_block_w=block_w, per_core_M=per_core_m, per_core_N=per_core_n, transpose_mcast=False,
            fused_activation=activation, fuse_batch=True)

    def check(self, program_config: Any = None) -> None:
        """Raise ValueError unless this layout and ``program_config`` (default: its own) are valid on its board.
        ttnn 0.81.1 checks some of these rules itself; a ``per_core_N`` too small for N, or one sized for another
        core count, it runs silently."""
        config = program_config or self.decode_program_config()
        board, problems = self.board, []
        if self.k % TILE or self.k_tiles % self.cores:
            problems.append(f"K={self.k} is not whole tiles on each of {self.cores} cores")
        elif (self.k_tiles // self.cores) % config.in0_block_w:
            problems.append(f"in0_block_w={config.in0_block_w} does not divide the {self.k_tiles // self.cores} "
                            "K tiles of a core")
        box = self.input_grid.bounding_box()
        if self.input_grid.num_cores() != self.cores:
            problems.append(f"the input grid has {self.input_grid.num_cores()} cores, not {self.cores}")
        if box.end.x >= board.grid_x or box.end.y >= board.grid_y:
            problems.append(f"input cores up to ({box.end.x}, {box.end.y}) leave the {board.grid_x}x{board.grid_y} "
                            "worker grid")
        if config.per_core_N * self.cores < self.n_tiles:
            problems.append(f"per_core_N={config.per_core_N} on {self.cores} cores covers less than N's "
                            f"{self.n_tiles} tiles")
        if config.per_core_M * TILE != -(-self.rows // TILE) * TILE:
            problems.append(f"per_core_M={config.per_core_M} is not the {self.rows} rows")
        if problems:
            raise ValueError(f"invalid DRAM-sharded matmul [{self.rows}, {self.k}] x [{self.k}, {self.n}]: "
                             + "; ".join(problems))


@dataclass(frozen=True)
class DecodeConfigs:
    """The decode layouts of one model replica. The interleaved variant (every layout None) keeps weights and
    activations DRAM-interleaved and lets ttnn pick the programs: the same model code runs either way."""

    residual: Any  # memory config of the residual stream between decode layers
    attention_norm: ShardedNorm | None = None  # on the residual grid, which the QKV matmul reads
    mlp_norm: ShardedNorm | None = None  # on the MLP grid
    lm_head_norm: ShardedNorm | None = None  # on the LM head grid
    qkv: DramShardedMatmul | None = None
    q: DramShardedMatmul | None = None  # cross-attention queries
    wo: DramShardedMatmul | None = None  # reads nlp_concat_heads_decode's output: one head per core
    mlp_in: DramShardedMatmul | None = None  # w1 / w3 (fc1)
    mlp_out: DramShardedMatmul | None = None  # w2 (fc2)
    lm_head_grid: Any = None
    board: Board | None = None
    dim: int = 0

    @classmethod
    def interleaved(cls) -> "DecodeConfigs":
        return cls(residual=ttnn.DRAM_MEMORY_CONFIG)

    @classmethod
    def sharded(cls, device: Any, *, dim: int, hidden_dim: int, n_heads: int, n_kv_heads: int,
                head_dim: int) -> "DecodeConfigs":
        """tt_transformers' configs for one chip of a replica (its ``DECODE_RESIDUAL_MEMCFG``,
        ``SHARDED_*_INPUT_MEMCFG``, ``SHARDED_NORM_*_PRGM_CFG``, ``XQKV_DECODE_PROGCFG``, ``ATTN_OUTPUT_PROGCFG``,
        ``DECODE_MLP_W1_W3_PRG_CONFIG``, ``DECODE_MLP_W2_PRG_CONFIG`` and LM head configs), each checked. On a mesh
        of N chips they are one chip's: the residual ``dim / N`` columns wide, the norms and column-parallel inputs
        the whole gathered row, the matmuls over the chip's heads and ``hidden_dim / N`` MLP columns."""
        board = Board.of(device)
        chips = device.get_num_devices()
        split = HeadSplit.of(n_heads, n_kv_heads, chips)
        q_heads, kv_heads, hidden = split.q_per_chip, split.kv_per_chip, hidden_dim // chips
        whole_row = grid_for_k(dim // TILE)
        mlp = grid_for_k_and_n(dim // TILE, hidden // TILE)
        heads = ttnn.num_cores_to_corerangeset(q_heads, device.compute_with_storage_grid_size(), row_wise=True)
        attention_norm = ShardedNorm.on(whole_row, dim)
        residual = (attention_norm if chips == 1 else ShardedNorm.on(grid_for_k(dim // chips // TILE), dim // chips))
        configs = cls(
            residual=residual.memory_config, attention_norm=attention_norm, mlp_norm=ShardedNorm.on(mlp, dim),
            lm_head_norm=ShardedNorm.on(lm_head_grid(dim), dim),
            qkv=DramShardedMatmul.on(whole_row, dim, (q_heads + 2 * kv_heads) * head_dim, board),
            q=DramShardedMatmul.on(whole_row, dim, q_heads * head_dim, board),
            wo=DramShardedMatmul(q_heads * head_dim, dim, heads, q_heads, board),
            mlp_in=DramShardedMatmul.on(mlp, dim, hidden, board),
            mlp_out=DramShardedMatmul.on(grid_for_k_and_n(hidden // TILE, dim // TILE), hidden, dim, board),
            lm_head_grid=lm_head_grid(dim), board=board, dim=dim)
        for layout in (configs.qkv, configs.q, configs.wo, configs.mlp_in, configs.mlp_out):
            layout.check()
        return configs

    def lm_head_splits(self, n: int, weight_dtype: Any, output_dtype: Any) -> list[tuple[int, int, Any]]:
        """The LM head's output columns ``[start, end)`` per matmul, each with its layout (a DramShardedMatmul, None
        when interleaved): as many matmuls as L1 needs for these dtypes."""
        if self.board is None:
            return [(0, n, None)]
        tile_bytes = {ttnn.float32: 4096, ttnn.bfloat16: 2048, ttnn.bfloat8_b: 1088, ttnn.bfloat4_b: 576}
        cores = self.lm_head_grid.num_cores
        width = self.board.lm_head_columns(cores, largest_divisor(self.dim // TILE // cores), tile_bytes[weight_dtype],
                                           tile_bytes[output_dtype])
        splits = []
        for start in range(0, n, width):
            end = min(n, start + width)
            layout = DramShardedMatmul.on(self.lm_head_grid, self.dim, end - start, self.board)
            layout.check()
            splits.append((start, end, layout))
        return splits
