"""The engine's persistent input batch and the inputs it prepares for each model step.

The batch keeps one row per batch slot in two persistent tables, the way vLLM's runner does
(seeds/prepare-inputs-for-model-forwarding.md): the token ids a request has so far
(``[max_num_seqs, max_model_len]``) and its KV block ids (``[max_num_seqs, max_blocks_per_seq]``), plus
for encoder-decoder models its cross-attention block ids and encoder length. A step is described by the
number of tokens scheduled per request; everything else (positions, token indices, input ids, slot
mapping, query start locations, ...) follows from the tables with array arithmetic over all scheduled
tokens at once, so the cost does not grow with a per-token Python loop.

Rows are never cleared: a request that joins a row overwrites only the entries it owns, and the tails
keep whatever earlier occupants left there. TT vLLM passes such stale tails to the model
(research/contract.md sections 2-3, tt-metal#56324), so the contract arguments built here carry them
too, and the models' tests rely on seeing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch


def page_table_width(max_model_len: int, block_size: int, num_blocks: int) -> int:
    """The page-table width TT vLLM sends: ``min(cdiv(max_model_len, block_size), num_blocks)``
    (research/contract.md section 3); the natural ``max_blocks_per_seq`` of an :class:`InputBatch`."""
    return min(-(-max_model_len // block_size), num_blocks)


@dataclass(frozen=True)
class StepInputs:
    """One step's model inputs and attention metadata.

    Request-level arrays follow the scheduling order (``req_ids``); token-level arrays hold one entry per
    scheduled token, the tokens of each request contiguous and in that order.
    """

    req_ids: list[str]
    rows: np.ndarray  # [n] int32: each request's persistent row (its batch slot)
    num_scheduled_tokens: np.ndarray  # [n] int32
    num_computed_tokens: np.ndarray  # [n] int32: tokens already in the KV cache (the chunk start)
    seq_lens: np.ndarray  # [n] int32: computed + scheduled (the chunk end)
    query_start_loc: np.ndarray  # [n + 1] int32: prefix sum of the scheduled tokens
    max_query_len: int
    request_indices: np.ndarray  # [T] int32: the row of each token
    positions: np.ndarray  # [T] int64: each token's position in its sequence
    token_indices: np.ndarray  # [T] int64: flat index into the token-id table
    input_ids: np.ndarray  # [T] int32
    block_table_indices: np.ndarray  # [T] int64: flat index into the block table
    block_numbers: np.ndarray  # [T] int32: the KV block of each token
    block_offsets: np.ndarray  # [T] int64: each token's offset in its block
    slot_mapping: np.ndarray  # [T] int64: the KV slot each token is written to

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    @property
    def num_tokens(self) -> int:
        """Total scheduled tokens."""
        return int(self.query_start_loc[-1])


@dataclass(frozen=True)
class DecodeInputs:
    """A decode step: each request runs its last token, which is all ``decode_forward`` needs to know (the
    per-token arrays of :class:`StepInputs` are a prefill's)."""

    req_ids: list[str]
    rows: np.ndarray  # [n] int32: each request's persistent row
    positions: np.ndarray  # [n] int32: the position of each request's last token (the tokens already computed)

    @property
    def seq_lens(self) -> np.ndarray:
        return self.positions + 1


class InputBatch:
    """Persistent per-slot token and block tables, and the per-step inputs derived from them.

    ``max_blocks_per_seq`` is the page-table width the model receives (see :func:`page_table_width`);
    ``max_cross_blocks > 0`` makes this an encoder-decoder batch, in which every request owns cross
    blocks holding its encoder's K/V; with ``cross_optional`` (image+text models) a request may have none
    (a text-only request: no cross blocks, ``encoder_len = 0``).
    """

    def __init__(self, max_num_seqs: int, max_model_len: int, block_size: int, max_blocks_per_seq: int,
                 max_cross_blocks: int = 0, cross_optional: bool = False) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.max_blocks_per_seq = max_blocks_per_seq
        self.max_cross_blocks = max_cross_blocks
        self.cross_optional = cross_optional
        self.token_ids = np.zeros((max_num_seqs, max_model_len), dtype=np.int32)
        self.num_tokens = np.zeros(max_num_seqs, dtype=np.int32)
        self.num_computed_tokens = np.zeros(max_num_seqs, dtype=np.int32)
        self.block_table = np.zeros((max_num_seqs, max_blocks_per_seq), dtype=np.int32)
        self.num_blocks = np.zeros(max_num_seqs, dtype=np.int32)
        self.cross_block_table = np.zeros((max_num_seqs, max_cross_blocks), dtype=np.int32)
        self.encoder_lens = np.zeros(max_num_seqs, dtype=np.int32)
        self.req_ids: list[str | None] = [None] * max_num_seqs  # row -> request
        self.row_of: dict[str, int] = {}

    @property
    def is_encoder_decoder(self) -> bool:
        return self.max_cross_blocks > 0

    # Rows.

    def add_request(self, req_id: str, token_ids: Sequence[int], block_ids: Sequence[int], slot: int | None = None,
                    cross_block_ids: Sequence[int] | None = None, encoder_len: int = 0,
                    num_computed_tokens: int = 0) -> int:
        """Place a request in ``slot`` (default: the lowest free row) and return its row.

        ``num_computed_tokens`` is what is already in its KV blocks (a prefix-cache hit). Only the entries
        the request owns are written; the rest of the row keeps earlier occupants' values.
        """
        if req_id in self.row_of:
            raise ValueError(f"request {req_id!r} is already in the batch (row {self.row_of[req_id]})")
        if not 0 < len(token_ids) <= self.max_model_len:
            raise ValueError(f"request {req_id!r}: {len(token_ids)} tokens, need 1..{self.max_model_len}")
        if not 0 <= num_computed_tokens < len(token_ids):
            raise ValueError(f"request {req_id!r}: {num_computed_tokens} computed tokens of {len(token_ids)}")
        if len(block_ids) > self.max_blocks_per_seq:
            raise ValueError(f"request {req_id!r}: {len(block_ids)} blocks > {self.max_blocks_per_seq}")
        self._check_cross(req_id, cross_block_ids, encoder_len)
        row = self._free_row(req_id, slot)
        self.req_ids[row] = req_id
        self.row_of[req_id] = row
        self.token_ids[row, :len(token_ids)] = token_ids
        self.num_tokens[row] = len(token_ids)
        self.num_computed_tokens[row] = num_computed_tokens
        self.block_table[row, :len(block_ids)] = block_ids
        self.num_blocks[row] = len(block_ids)
        if self.is_encoder_decoder:
            self.cross_block_table[row, :len(cross_block_ids)] = cross_block_ids
            self.encoder_lens[row] = encoder_len
        return row

    def free_row(self, rows: range) -> int:
        """The lowest free row among ``rows`` (a data-parallel replica's slots)."""
        for row in rows:
            if self.req_ids[row] is None:
                return row
        raise ValueError(f"no free row in {rows.start}..{rows.stop - 1}")

    def remove_request(self, req_id: str) -> int:
        """Free the request's row and return it. The row's contents stay (see the module docstring)."""
        row = self._row(req_id)
        del self.row_of[req_id]
        self.req_ids[row] = None
        return row

    def append_token(self, req_id: str, token: int) -> None:
        """Append a sampled token to the request's sequence."""
        self.append_tokens([self._row(req_id)], [token])

    def append_tokens(self, rows: Sequence[int], tokens: Sequence[int]) -> None:
        """Append one sampled token to each of ``rows`` (distinct, occupied), in one array update."""
        rows = np.asarray(rows, dtype=np.intp)
        ends = self.num_tokens[rows]
        if (ends >= self.max_model_len).any():
            row = int(rows[np.argmax(ends >= self.max_model_len)])
            raise ValueError(f"request {self.req_ids[row]!r} is at max_model_len ({self.max_model_len})")
        self.token_ids[rows, ends] = tokens
        self.num_tokens[rows] = ends + 1

    def append_blocks(self, req_id: str, block_ids: Sequence[int]) -> None:
        """Give the request more KV blocks, after those it has."""
        row = self._row(req_id)
        start, end = self.num_blocks[row], self.num_blocks[row] + len(block_ids)
        if end > self.max_blocks_per_seq:
            raise ValueError(f"request {req_id!r}: {end} blocks > {self.max_blocks_per_seq}")
        self.block_table[row, start:end] = block_ids
        self.num_blocks[row] = end

    def replace_last_block(self, req_id: str, block_id: int) -> None:
        """Swap the request's last KV block for ``block_id`` (its copy of a block it shared: copy-on-write)."""
        row = self._row(req_id)
        self.block_table[row, self.num_blocks[row] - 1] = block_id

    # Steps.

    def prepare(self, num_scheduled_tokens: dict[str, int]) -> StepInputs:
        """The inputs of a step that runs ``num_scheduled_tokens[r]`` tokens of each request ``r``, in the
        dict's order, starting at each request's first uncomputed token."""
        req_ids = list(num_scheduled_tokens)
        rows = self._rows(req_ids)
        scheduled = np.fromiter(num_scheduled_tokens.values(), dtype=np.int32, count=len(req_ids))
        computed = self.num_computed_tokens[rows]
        seq_lens = computed + scheduled
        self._check_schedule(req_ids, rows, scheduled, seq_lens)

        # Token level: each token's request, then its offset within that request's scheduled tokens
        # (a global arange minus the request's start, repeated over its tokens).
        cu_scheduled = np.cumsum(scheduled, dtype=np.int32)
        total = int(cu_scheduled[-1])
        request_indices = np.repeat(rows, scheduled)
        offsets = np.arange(total, dtype=np.int64) - np.repeat(cu_scheduled - scheduled, scheduled)
        positions = np.repeat(computed, scheduled).astype(np.int64) + offsets
        token_indices = request_indices.astype(np.int64) * self.max_model_len + positions
        block_table_indices = request_indices.astype(np.int64) * self.max_blocks_per_seq + positions // self.block_size
        block_numbers = self.block_table.reshape(-1)[block_table_indices]
        block_offsets = positions % self.block_size
        return StepInputs(
            req_ids=req_ids,
            rows=rows,
            num_scheduled_tokens=scheduled,
            num_computed_tokens=computed,
            seq_lens=seq_lens,
            query_start_loc=np.concatenate([np.zeros(1, dtype=np.int32), cu_scheduled]),
            max_query_len=int(scheduled.max()),
            request_indices=request_indices,
            positions=positions,
            token_indices=token_indices,
            input_ids=self.token_ids.reshape(-1)[token_indices],
            block_table_indices=block_table_indices,
            block_numbers=block_numbers,
            block_offsets=block_offsets,
            slot_mapping=block_numbers.astype(np.int64) * self.block_size + block_offsets,
        )

    def prepare_decode(self, req_ids: list[str], ahead: bool = False) -> DecodeInputs:
        """The inputs of a decode step of ``req_ids``, in that order: each runs its last token, the only one not
        computed yet, in a block it has. ``ahead``: that token is still on the device (sampled by a step not read
        yet, fed back by the model): the table holds the tokens before it."""
        rows = self._rows(req_ids)
        positions = self.num_computed_tokens[rows]
        bad = ((self.num_tokens[rows] != positions + (not ahead))
               | (positions // self.block_size >= self.num_blocks[rows]))
        if bad.any():
            raise ValueError(f"not a decode step for {[r for r, b in zip(req_ids, bad) if b]}: decode runs exactly "
                             "each request's last token, in a block it has")
        return DecodeInputs(req_ids, rows, positions)

    def advance(self, step: StepInputs | DecodeInputs) -> None:
        """Record that the step ran: its tokens are now in the KV cache."""
        self.num_computed_tokens[step.rows] = step.seq_lens

    # The TT vLLM contract (research/contract.md sections 2-3; docs/contract.md).

    def prefill_kwargs(self, step: StepInputs, encoder_inputs: Sequence[Any] | None = None) -> dict[str, Any]:
        """``prefill_forward``'s batch arguments, as TT vLLM's runner builds them: one unpadded row per
        scheduled request in scheduling order, token and page-table rows straight from the persistent
        tables (stale tails included), ``tokens`` as wide as the longest chunk end.

        ``encoder_inputs`` (encoder-decoder only, one entry per row, ``None`` where the row's cross K/V is
        already cached) are the engine's; they are passed through.
        """
        rows = step.rows
        kwargs: dict[str, Any] = {
            "tokens": torch.from_numpy(self.token_ids[rows, :int(step.seq_lens.max())]),
            "prompt_lens": step.seq_lens.astype(np.int64),
            "start_pos": step.num_computed_tokens.astype(np.int32),
            "page_table": torch.from_numpy(self.block_table[rows]),
            "empty_slots": rows.tolist(),
        }
        if not self.is_encoder_decoder:
            if encoder_inputs is not None:
                raise ValueError("encoder_inputs given to a decoder-only batch")
            return kwargs
        if encoder_inputs is None or len(encoder_inputs) != step.num_reqs:
            raise ValueError(f"an encoder-decoder prefill of {step.num_reqs} rows needs one encoder_inputs entry "
                             f"per row, got {None if encoder_inputs is None else len(encoder_inputs)}")
        kwargs["cross_page_table"] = torch.from_numpy(self.cross_block_table[rows])
        kwargs["encoder_inputs"] = list(encoder_inputs)
        kwargs["encoder_lens"] = self.encoder_lens[rows]
        return kwargs

    def decode_kwargs(self, step: DecodeInputs) -> dict[str, Any]:
        """``decode_forward``'s batch arguments, as TT vLLM's runner builds them: ``max_num_seqs`` rows,
        row = slot; a row not decoding this step gets token 0, ``start_pos = -1``, a zero page-table row
        and, for encoder-decoder models, a zero cross row and ``encoder_lens = 0``."""
        rows, b = step.rows, self.max_num_seqs
        start_pos = np.full(b, -1, dtype=np.int32)
        start_pos[rows] = step.positions
        page_table = np.zeros_like(self.block_table)
        page_table[rows] = self.block_table[rows]
        kwargs: dict[str, Any] = {
            "tokens": self.decode_tokens(step),
            "start_pos": torch.from_numpy(start_pos),
            "page_table": torch.from_numpy(page_table),
        }
        if self.is_encoder_decoder:
            cross_page_table = np.zeros_like(self.cross_block_table)
            cross_page_table[rows] = self.cross_block_table[rows]
            encoder_lens = np.zeros(b, dtype=np.int32)
            encoder_lens[rows] = self.encoder_lens[rows]
            kwargs["cross_page_table"] = torch.from_numpy(cross_page_table)
            kwargs["encoder_lens"] = torch.from_numpy(encoder_lens)
        return kwargs

    def decode_tokens(self, step: DecodeInputs) -> torch.Tensor:
        """``decode_forward``'s ``tokens [max_num_seqs, 1]``: each row's last token, 0 in rows not decoding."""
        tokens = np.zeros((self.max_num_seqs, 1), dtype=np.int32)
        tokens[step.rows, 0] = self.token_ids[step.rows, step.positions]
        return torch.from_numpy(tokens)

    # Checks.

    def _rows(self, req_ids: list[str]) -> np.ndarray:
        if not req_ids:
            raise ValueError("nothing scheduled")
        try:
            return np.fromiter(map(self.row_of.__getitem__, req_ids), dtype=np.int32, count=len(req_ids))
        except KeyError as e:
            raise KeyError(f"request {e.args[0]!r} is not in the batch") from None

    def _row(self, req_id: str) -> int:
        if req_id not in self.row_of:
            raise KeyError(f"request {req_id!r} is not in the batch")
        return self.row_of[req_id]

    def _free_row(self, req_id: str, slot: int | None) -> int:
        if slot is None:
            free = [row for row, occupant in enumerate(self.req_ids) if occupant is None]
            if not free:
                raise ValueError(f"request {req_id!r}: all {self.max_num_seqs} slots are taken")
            return free[0]
        if not 0 <= slot < self.max_num_seqs:
            raise ValueError(f"request {req_id!r}: slot {slot} outside 0..{self.max_num_seqs - 1}")
        if self.req_ids[slot] is not None:
            raise ValueError(f"request {req_id!r}: slot {slot} holds {self.req_ids[slot]!r}")
        return slot

    def _check_cross(self, req_id: str, cross_block_ids: Sequence[int] | None, encoder_len: int) -> None:
        if not self.is_encoder_decoder:
            if cross_block_ids is not None or encoder_len:
                raise ValueError(f"request {req_id!r}: cross blocks or encoder_len in a decoder-only batch")
            return
        if self.cross_optional and not cross_block_ids and encoder_len == 0:
            return
        if cross_block_ids is None or not 0 < encoder_len:
            raise ValueError(f"request {req_id!r}: an encoder-decoder request needs cross blocks and encoder_len > 0")
        needed = -(-encoder_len // self.block_size)
        if not needed <= len(cross_block_ids) <= self.max_cross_blocks:
            raise ValueError(f"request {req_id!r}: {len(cross_block_ids)} cross blocks, need {needed}.."
                             f"{self.max_cross_blocks} for encoder_len {encoder_len}")

    def _check_schedule(self, req_ids: list[str], rows: np.ndarray, scheduled: np.ndarray,
                        seq_lens: np.ndarray) -> None:
        """Every scheduled token must exist in the token table and have a KV block of its own: past them
        the tables hold stale entries, which would silently give wrong inputs and slots."""
        bad = ((scheduled < 1) | (seq_lens > self.num_tokens[rows])
               | (-(-seq_lens // self.block_size) > self.num_blocks[rows]))
        if bad.any():
            i = int(np.argmax(bad))
            row = rows[i]
            raise ValueError(f"request {req_ids[i]!r}: {scheduled[i]} tokens scheduled after "
                             f"{seq_lens[i] - scheduled[i]} computed, but it has {self.num_tokens[row]} tokens "
                             f"and {self.num_blocks[row]} blocks of {self.block_size}")
