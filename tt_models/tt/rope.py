"""Rotary position embedding for ``ttnn.experimental.rotary_embedding_llama``.

TT-NN's rotary op rotates interleaved pairs ``(x[2k], x[2k+1])`` (Meta's layout), while HF checkpoints
rotate halves ``(x[k], x[k + D/2])``. The models therefore permute each head's rows of the Q and K
projections (:func:`hf_to_meta_rows`) and feed pairwise-duplicated cos/sin. The frequencies, including
Llama-3 / YaRN / linear scaling and its attention factor, come from HF's own rotary module.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import user_cores
from tt_models.tt.decode_inputs import HostInput, HostInputs, advanced_index, host_tensor
from tt_models.tt.weights import as_tensor

TILE = 32


def hf_to_meta_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reorder a Q/K projection weight ``[n_heads * D, in]`` (or bias ``[n_heads * D]``) from HF's
    rotate-half layout to interleaved pairs, head by head."""
    head_dim = weight.shape[0] // n_heads
    rest = weight.shape[1:]
    return weight.reshape(n_heads, 2, head_dim // 2, *rest).transpose(1, 2).reshape(weight.shape)


def transformation_matrix() -> torch.Tensor:
    """``T`` with ``(x @ T)[2k] = -x[2k+1]`` and ``(x @ T)[2k+1] = x[2k]`` on one 32-column tile."""
    t = torch.zeros(TILE, TILE)
    t[torch.arange(0, TILE, 2), torch.arange(1, TILE, 2)] = 1.0
    t[torch.arange(1, TILE, 2), torch.arange(0, TILE, 2)] = -1.0
    return t


class RotarySetup:
    """cos/sin for any positions, and the transformation matrices, on one device."""

    def __init__(self, hf_config: Any, head_dim: int, device: Any, decode_rows: int) -> None:
        rotary = LlamaRotaryEmbedding(config=hf_config)
        self.inv_freq = rotary.inv_freq.float()
        self.scaling = float(rotary.attention_scaling)
        self.head_dim = head_dim
        self.device = device
        self.trans_mat_prefill = as_tensor(transformation_matrix()[None, None], device)
        self.batch_cores = user_cores(device, decode_rows)
        self.decode_memory_config = ttnn.create_sharded_memory_config(
            (TILE, head_dim), self.batch_cores, ttnn.ShardStrategy.HEIGHT, ttnn.ShardOrientation.ROW_MAJOR,
            use_height_and_width_as_shard_shape=True)
        trans_mem = ttnn.create_sharded_memory_config(
            (TILE, TILE), self.batch_cores, ttnn.ShardStrategy.HEIGHT, ttnn.ShardOrientation.ROW_MAJOR,
            use_height_and_width_as_shard_shape=True)
        self.trans_mat_decode = as_tensor(transformation_matrix().repeat(1, 1, decode_rows, 1), device,
                                          memory_config=trans_mem)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pairwise-duplicated cos and sin ``[len(positions), head_dim]`` (fp32, with HF's attention factor)."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        cos = (angles.cos() * self.scaling).repeat_interleave(2, dim=-1)
        sin = (angles.sin() * self.scaling).repeat_interleave(2, dim=-1)
        return cos, sin

    def prefill(self, start: int, length: int) -> tuple[Any, Any]:
        """cos/sin ``[1, 1, length, D]`` for positions ``start .. start + length - 1``."""
        cos, sin = self.cos_sin(torch.arange(start, start + length))
        return as_tensor(cos[None, None], self.device), as_tensor(sin[None, None], self.device)

    def prefill_inputs(self, start: int, length: int) -> HostInputs:
        """:meth:`prefill`'s cos/sin as host inputs (``cos``, ``sin``) of a traced prefill."""
        cos, sin = self.cos_sin(torch.arange(start, start + length))
        return {"cos": host_tensor(cos[None, None], self.device), "sin": host_tensor(sin[None, None], self.device)}

    def decode_inputs(self, positions: torch.Tensor) -> HostInputs:
        """cos/sin ``[1, B, 32, D]`` as host inputs, one user per core (row 0 holds the user's position; padding
        rows ``-1`` use position 0, their results are never written)."""
        cos, sin = self.cos_sin(positions.clamp(min=0))
        cos = cos[None, :, None, :].expand(1, -1, TILE, -1).contiguous()
        sin = sin[None, :, None, :].expand(1, -1, TILE, -1).contiguous()
        return {"cos": host_tensor(cos, self.device, memory_config=self.decode_memory_config),
                "sin": host_tensor(sin, self.device, memory_config=self.decode_memory_config)}


class RotaryTable:
    """cos/sin of every position below ``max_seq_len`` on the device, from which a decode step looks up each user's
    rows by its rotary index (tt_transformers' ``get_rot_mats``): a step that advances the index itself
    (``ttnn.plus_one``) then needs nothing from the host. The rows equal :meth:`RotarySetup.decode_inputs`'."""

    def __init__(self, rope: RotarySetup, max_seq_len: int) -> None:
        self.rope = rope
        cos, sin = rope.cos_sin(torch.arange(max_seq_len))
        self.cos = as_tensor(cos[None, None], rope.device, layout=ttnn.ROW_MAJOR_LAYOUT)
        self.sin = as_tensor(sin[None, None], rope.device, layout=ttnn.ROW_MAJOR_LAYOUT)

    def decode_rows(self, index: Any) -> tuple[Any, Any]:
        """cos/sin ``[1, B, 1, D]`` of the device ``index`` ``[1, B]``, one user per core as
        :meth:`RotarySetup.decode_inputs` shards them (the rotary op reads a user's row 0)."""
        users, head_dim = index.shape[-1], self.rope.head_dim
        rows = []
        for table in (self.cos, self.sin):
            x = ttnn.embedding(index, table, layout=ttnn.TILE_LAYOUT)  # [1, B, D]
            x = ttnn.transpose(ttnn.reshape(x, (1, 1, users, head_dim)), 1, 2)
            rows.append(ttnn.interleaved_to_sharded(x, self.rope.decode_memory_config))
        return rows[0], rows[1]


def rotary_index(rope_positions: torch.Tensor, positions: torch.Tensor, device: Any) -> HostInput:
    """The users' rotary indices ``[1, B]`` (uint32) into a :class:`RotaryTable` (any of a model's tables: each holds
    every position), which a decode step advances by one on the device (:func:`advanced_index`). Padding rows
    (``positions`` ``-1``) index row 0: their rows are never written nor read."""
    return advanced_index(rope_positions.clamp(min=0).reshape(1, -1), positions, device, ttnn.uint32)
