"""RMSNorm and LayerNorm with their weights laid out as TT-NN's norm kernels read them.

Given a :class:`ShardedNorm` (decode), a norm runs width-sharded in L1 with its sharded program config, its input
moved to that layout first, as tt_transformers' decode norms run.

The interleaved norm (prefill, encoders) reads its weights as one TILE row: with ROW_MAJOR weights tt-metal's
interleaved kernel holds whole rows in L1 and has no large-row fallback, so an 8192-wide row (Llama 3.1 70B, gathered
on every chip) overflows L1 ("Statically allocated dataflow buffers ... beyond max L1 size"); with TILE weights it
streams rows that do not fit (``layernorm_op_multi_core``: ``use_row_major_kernel`` disables ``large_tensor_needed``).
tt_transformers avoids that kernel for dims >= 8192 with a distributed prefill norm instead. The sharded decode norm
keeps tt_transformers' ROW_MAJOR sticks.

On a mesh a norm of the residual stream takes it fractured (each chip ``dim / N`` columns), all-gathers it and
normalizes the whole row on every chip (replicated output), as tt_transformers' ``DistributedNorm`` does on 1xN
meshes; a norm of per-head values (Mllama's Q/K norms) takes them as they are (``fractured=False``).
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import ShardedNorm, reshard
from tt_models.tt.tensor_parallel import gather
from tt_models.tt.weights import as_tensor

TILE = 32


class _Affine:
    """A norm weight (gamma or beta) in both layouts the norm kernels read."""

    def __init__(self, weight: torch.Tensor, device: Any) -> None:
        self.sticks = as_tensor(weight.reshape(1, 1, -1, TILE), device, layout=ttnn.ROW_MAJOR_LAYOUT)  # sharded
        self.row = as_tensor(weight.reshape(1, 1, 1, -1), device)  # interleaved


class RMSNorm:
    def __init__(self, weight: torch.Tensor, eps: float, device: Any, *, fractured: bool = True) -> None:
        self.device, self.fractured = device, fractured
        self.weight = _Affine(weight, device)
        self.eps = eps  # always explicit: ttnn's default epsilon is 1e-12

    def forward(self, x: Any, sharded: ShardedNorm | None = None) -> Any:
        if self.fractured:
            x = gather(x, self.device)
        if sharded is None:
            return ttnn.rms_norm(x, epsilon=self.eps, weight=self.weight.row)
        return ttnn.rms_norm(reshard(x, sharded.memory_config), epsilon=self.eps, weight=self.weight.sticks,
                             program_config=sharded.program_config, memory_config=sharded.memory_config)


class LayerNorm:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, eps: float, device: Any) -> None:
        self.device = device
        self.weight = _Affine(weight, device)
        self.bias = _Affine(bias, device)
        self.eps = eps

    def forward(self, x: Any, sharded: ShardedNorm | None = None) -> Any:
        x = gather(x, self.device)
        if sharded is None:
            return ttnn.layer_norm(x, epsilon=self.eps, weight=self.weight.row, bias=self.bias.row)
        return ttnn.layer_norm(reshard(x, sharded.memory_config), epsilon=self.eps, weight=self.weight.sticks,
                               bias=self.bias.sticks, program_config=sharded.program_config,
                               memory_config=sharded.memory_config)
