"""A linear layer on the device: its weight (``[in, out]``, as ``ttnn.linear`` takes it), bias and activation.

Without a layout the weight is DRAM-interleaved and ttnn picks the programs. With a :class:`DramShardedMatmul`
it is DRAM width-sharded as tt_transformers stores decode weights: decode (one tile of users) runs the
DRAM-sharded program on an L1 width-sharded activation, any other row count (prefill, cross K/V) a 2D multicast
program over the same weight, so one copy serves both.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DramShardedMatmul, reshard
from tt_models.tt.weights import as_bias, as_linear_weight


def fused_activation(name: str) -> Any:
    """An HF activation name as the ``UnaryWithParam`` a program config fuses (HF's "gelu" is the exact, erf form)."""
    if name == "gelu":
        return ttnn.UnaryWithParam((ttnn.UnaryOpType.GELU, 0.0))  # parameter 0: not the fast approximation
    ops = {"silu": ttnn.UnaryOpType.SILU, "relu": ttnn.UnaryOpType.RELU}
    if name not in ops:
        raise ValueError(f"activation {name!r} has no fused form (known: gelu, {', '.join(ops)})")
    return ttnn.UnaryWithParam(ops[name])


class Linear:
    def __init__(self, weight: torch.Tensor, device: Any, dtype: Any, *, bias: torch.Tensor | None = None,
                 activation: str | None = None, layout: DramShardedMatmul | None = None) -> None:
        """``weight``: an HF ``nn.Linear`` weight ``[out, in]``."""
        self.layout = layout
        self.weight = as_linear_weight(weight, device, dtype,
                                       memory_config=None if layout is None else layout.weight_memory_config())
        self.bias = None if bias is None else as_bias(bias, device)
        self.activation = activation
        self.input_memory_config = None if layout is None else layout.input_memory_config()
        if layout is not None:
            # Sharded matmuls take their activation in the program config only.
            self.fused = None if activation is None else fused_activation(activation)
            self.decode_config = layout.decode_program_config(self.fused)

    def forward(self, x: Any, *, dtype: Any = None) -> Any:
        """Interleaved ``x`` of any rows (prefill, encoder states) -> DRAM-interleaved output."""
        if self.layout is None:
            return ttnn.linear(x, self.weight, bias=self.bias, activation=self.activation, dtype=dtype)
        rows = math.prod(tuple(x.shape)[:-1])
        return ttnn.linear(x, self.weight, bias=self.bias, dtype=dtype,
                           program_config=self.layout.prefill_program_config(rows, self.fused))

    def forward_decode(self, x: Any, *, memory_config: Any = None, dtype: Any = None) -> Any:
        """One tile of users. With a layout: ``x`` goes to the matmul's L1 width-sharded input layout and the output
        is L1 width-sharded over the same cores; without, as :meth:`forward`, into ``memory_config``."""
        if self.layout is None:
            return ttnn.linear(x, self.weight, bias=self.bias, activation=self.activation, dtype=dtype,
                               memory_config=memory_config)
        return ttnn.linear(reshard(x, self.input_memory_config), self.weight, bias=self.bias, dtype=dtype,
                           program_config=self.decode_config, memory_config=ttnn.L1_WIDTH_SHARDED_MEMORY_CONFIG)
