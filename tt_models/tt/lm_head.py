"""Final projection to vocabulary logits, of one tile of rows (decode users, or the tile of a prefill's last token).

With sharded decode layouts the weight is split by output columns into as many DRAM-sharded matmuls as L1 holds
(tt_transformers' LM head), each reading the input width-sharded over the LM head grid; their outputs are
concatenated into one DRAM row block of float32 logits, as the interleaved head produces.

On a mesh the head is column-parallel over the vocabulary (padded to whole tiles on every chip): each chip computes
its slice of the logits from the replicated normed input, and the slices are joined on the host
(:func:`~tt_models.tt.weights.logits_to_host`) or, for device sampling, gathered on the device (:func:`gather_logits`).
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs, reshard
from tt_models.tt.linear import Linear
from tt_models.tt.paged_inputs import TILE, PrefillChunk
from tt_models.tt.tensor_parallel import chips, gather
from tt_models.tt.weights import logits_to_host


class LMHead:
    def __init__(self, weight: torch.Tensor, device: Any, weight_dtype: Any, decode: DecodeConfigs,
                 bias: torch.Tensor | None = None) -> None:
        """``weight``: ``[vocab, dim]``."""
        n = chips(device)
        self.vocab_size = weight.shape[0]
        pad = -weight.shape[0] % (n * TILE) if n > 1 else 0  # each chip's slice of the vocabulary in whole tiles
        if pad:  # (copies avoided where they can be: a 70B head is 2 GB)
            weight = torch.nn.functional.pad(weight, (0, 0, 0, pad))
            bias = None if bias is None else torch.nn.functional.pad(bias, (0, pad))
        per_chip = weight.shape[0] // n

        def columns(t: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None:
            """Columns ``start .. end`` of every chip's slice, in chip order (``t`` itself when that is all of it)."""
            if t is None or (start, end) == (0, per_chip):
                return t
            return torch.cat([t[c * per_chip + start: c * per_chip + end] for c in range(n)])

        self.splits = [Linear(columns(weight, start, end), device, weight_dtype, bias=columns(bias, start, end),
                              layout=layout, parallel="column")
                       for start, end, layout in decode.lm_head_splits(per_chip, weight_dtype, ttnn.float32)]

    def forward(self, x: Any) -> Any:
        """``x [1, 1, 32, dim]`` -> float32 logits ``[1, 1, 32, vocab]`` in DRAM."""
        if self.splits[0].input_memory_config is not None:  # once for every split
            x = reshard(x, self.splits[0].input_memory_config)
        parts = []
        for split in self.splits:
            part = split.forward_decode(x, dtype=ttnn.float32)
            if part.is_sharded():  # free each split's L1 output before the next one's
                sharded, part = part, ttnn.sharded_to_interleaved(part, ttnn.DRAM_MEMORY_CONFIG)
                ttnn.deallocate(sharded)
            parts.append(part)
        if len(parts) == 1:
            return parts[0]
        logits = ttnn.concat(parts, dim=-1, memory_config=ttnn.DRAM_MEMORY_CONFIG)
        for part in parts:
            ttnn.deallocate(part)
        return logits


def last_token_logits(x: Any, chunk: PrefillChunk, norm: Any | None, lm_head: LMHead, device: Any,
                      on_device: bool = False) -> Any:
    """Logits of a prefill chunk's last position: the final norm (if any) and LM head run on the one tile
    holding it. Host ``[V]``, or with ``on_device`` the device row ``[1, 1, 1, V]`` (for device sampling; gathered
    over a mesh)."""
    return last_row_logits(last_tile_logits(x, chunk, norm, lm_head, device, on_device), chunk, lm_head, device,
                           on_device)


def last_tile_logits(x: Any, chunk: PrefillChunk, norm: Any | None, lm_head: LMHead, device: Any,
                     on_device: bool = False) -> Any:
    """Device ops only (traceable): the device logits ``[1, 1, 32, V]`` of the tile holding the chunk's last
    position, gathered over a mesh with ``on_device``."""
    tile = (chunk.end - 1 - chunk.start) // TILE * TILE
    x = gather(x, device) if norm is None else norm.forward(x)  # the head reads whole rows
    x = ttnn.slice(x, (0, 0, tile, 0), (1, 1, tile + TILE, x.shape[-1]))
    logits = lm_head.forward(x)
    return gather_logits(logits, device, lm_head.vocab_size) if on_device else logits


def last_row_logits(logits: Any, chunk: PrefillChunk, lm_head: LMHead, device: Any, on_device: bool = False) -> Any:
    """The chunk's last position's row of :func:`last_tile_logits`: host ``[V]``, or the device row
    ``[1, 1, 1, V]`` with ``on_device``."""
    row = (chunk.end - 1 - chunk.start) % TILE
    if on_device:
        return ttnn.slice(logits, (0, 0, row, 0), (1, 1, row + 1, logits.shape[-1]))
    return logits_to_host(logits, device, lm_head.vocab_size)[0, 0, row].float()


def gather_logits(logits: Any, device: Any, vocab_size: int) -> Any:
    """Vocabulary-split logits whole on every chip of a mesh (the device sampler reads whole rows)."""
    if chips(device) == 1:
        return logits
    whole = gather(logits, device)
    ttnn.deallocate(logits)
    return ttnn.slice(whole, (0, 0, 0, 0), (*tuple(whole.shape)[:-1], vocab_size))
