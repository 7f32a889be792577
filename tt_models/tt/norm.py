"""RMSNorm and LayerNorm with their weights laid out as TT-NN's norm kernels read them.

Given a :class:`ShardedNorm` (decode), a norm runs width-sharded in L1 with its sharded program config, its input
moved to that layout first, as tt_transformers' decode norms run.

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


def _row_major_weight(weight: torch.Tensor, device: Any) -> Any:
    # The norm kernels read gamma/beta as ROW_MAJOR rows of 32 values: [1, 1, dim / 32, 32].
    return as_tensor(weight.reshape(1, 1, -1, TILE), device, layout=ttnn.ROW_MAJOR_LAYOUT)


class RMSNorm:
    def __init__(self, weight: torch.Tensor, eps: float, device: Any, *, fractured: bool = True) -> None:
        self.device, self.fractured = device, fractured
        self.weight = _row_major_weight(weight, device)
        self.eps = eps  # always explicit: ttnn's default epsilon is 1e-12

    def forward(self, x: Any, sharded: ShardedNorm | None = None) -> Any:
        if self.fractured:
            x = gather(x, self.device)
        if sharded is None:
            return ttnn.rms_norm(x, epsilon=self.eps, weight=self.weight)
        return ttnn.rms_norm(reshard(x, sharded.memory_config), epsilon=self.eps, weight=self.weight,
                             program_config=sharded.program_config, memory_config=sharded.memory_config)


class LayerNorm:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, eps: float, device: Any) -> None:
        self.device = device
        self.weight = _row_major_weight(weight, device)
        self.bias = _row_major_weight(bias, device)
        self.eps = eps

    def forward(self, x: Any, sharded: ShardedNorm | None = None) -> Any:
        x = gather(x, self.device)
        if sharded is None:
            return ttnn.layer_norm(x, epsilon=self.eps, weight=self.weight, bias=self.bias)
        return ttnn.layer_norm(reshard(x, sharded.memory_config), epsilon=self.eps, weight=self.weight,
                               bias=self.bias, program_config=sharded.program_config,
                               memory_config=sharded.memory_config)
