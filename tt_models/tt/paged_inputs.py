"""Per-row page-table slices for a prefill chunk (shared by every model's prefill)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

TILE = 32


@dataclass(frozen=True)
class PrefillChunk:
    """Positions ``start .. end - 1`` of one row, run from the block boundary ``start`` falls in.

    ``paged_fill_cache`` writes whole tiles from a block's start, so a chunk starting mid-block restarts at
    the block boundary and recomputes up to ``bs - 1`` cached tokens (their K/V come out identical).
    """

    start: int  # block-aligned
    end: int
    padded: int  # tokens run: ``end - start`` rounded up to a tile
    fill_blocks: torch.Tensor  # the blocks this chunk's tiles are written to
    read_blocks: torch.Tensor  # the blocks chunked attention reads: 0 .. start + padded

    @classmethod
    def of(cls, page_table_row: torch.Tensor, start: int, end: int, block_size: int) -> "PrefillChunk":
        chunk_start = start // block_size * block_size
        padded = -(-(end - chunk_start) // TILE) * TILE
        # Entries past ceil(end / bs) may be stale (another request's blocks): never use them.
        own = page_table_row[: -(-end // block_size)]
        # Chunked SDPA reads ceil((start + padded) / bs) blocks; past the row's own, repeat its last block so
        # that the padding queries never read another request's blocks.
        needed = -(-(chunk_start + padded) // block_size)
        read = torch.cat([own, own[-1:].expand(max(0, needed - len(own)))])
        return cls(chunk_start, end, padded, own[chunk_start // block_size:], read)

    def padded_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = torch.zeros(self.padded, dtype=torch.int64)
        ids[: self.end - self.start] = tokens[self.start: self.end]
        return ids
