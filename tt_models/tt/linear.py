"""A linear layer on the device: its weight (``[in, out]``, as ``ttnn.linear`` takes it), bias and activation.

Without a layout the weight is DRAM-interleaved and ttnn picks the programs. With a :class:`DramShardedMatmul`
it is DRAM width-sharded as tt_transformers stores decode weights: decode (one tile of users) runs the
DRAM-sharded program on an L1 width-sharded activation, any other row count (prefill, cross K/V) a 2D multicast
program over the same weight, so one copy serves both.

On a mesh a linear layer is column-parallel (each chip computes its block of output features from the replicated
input) or row-parallel (each chip reads its slice of the input features; the partial sums are reduce-scattered
into the fractured residual and the bias added to each chip's slice), see :mod:`tt_models.tt.tensor_parallel`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DramShardedMatmul, reshard
from tt_models.tt.tensor_parallel import chips, reduce_scatter
from tt_models.tt.weights import as_bias, as_linear_weight


def fused_activation(name: str) -> Any:
    """An HF activation name as the ``UnaryWithParam`` a program config fuses (HF's "gelu" is the exact, erf form)."""
    if name == "gelu":
        return ttnn.UnaryWithParam((ttnn.UnaryOpType.GELU, 0.0))  # parameter 0: not the fast approximation
    ops = {"silu": ttnn.UnaryOpType.SILU, "relu": ttnn.UnaryOpType.RELU, "gelu_tanh": ttnn.UnaryOpType.GELU_TANH}
    if name not in ops:
        raise ValueError(f"activation {name!r} has no fused form (known: gelu, {', '.join(ops)})")
    return ttnn.UnaryWithParam(ops[name])


class Linear:
    def __init__(self, weight: torch.Tensor, device: Any, dtype: Any, *, bias: torch.Tensor | None = None,
                 activation: str | None = None, layout: DramShardedMatmul | None = None,
                 parallel: str | None = None) -> None:
        """``weight``: an HF ``nn.Linear`` weight ``[out, in]``. ``parallel`` on a mesh: ``"column"`` (its output
        rows in chip order: chip ``c`` gets the ``c``-th equal block) or ``"row"`` (chip ``c`` the ``c``-th block of
        input columns); None replicates it. ``layout``: one chip's decode layout."""
        if parallel not in (None, "column", "row"):
            raise ValueError(f"parallel={parallel!r}: expected None, 'column' or 'row'")
        split = chips(device) > 1 and parallel is not None
        self.device = device
        self.layout = layout
        self.row_parallel = split and parallel == "row"
        self.weight = as_linear_weight(weight, device, dtype,
                                       memory_config=None if layout is None else layout.weight_memory_config(),
                                       shard_dim=(-2 if self.row_parallel else -1) if split else None)
        self.bias = None if bias is None else as_bias(bias, device, shard_dim=-1 if split else None)
        self.activation = activation
        self.input_memory_config = None if layout is None else layout.input_memory_config()
        if layout is not None:
            # Sharded matmuls take their activation in the program config only.
            self.fused = None if activation is None else fused_activation(activation)
            self.decode_config = layout.decode_program_config(self.fused)

    def forward(self, x: Any, *, dtype: Any = None) -> Any:
        """Interleaved ``x`` of any rows (prefill, encoder states) -> DRAM-interleaved output."""
        bias = None if self.row_parallel else self.bias
        if self.layout is None:
            out = ttnn.linear(x, self.weight, bias=bias, activation=self.activation, dtype=dtype)
        else:
            rows = math.prod(tuple(x.shape)[:-1])
            out = ttnn.linear(x, self.weight, bias=bias, dtype=dtype,
                              program_config=self.layout.prefill_program_config(rows, self.fused))
        return self._reduce(out)

    def forward_decode(self, x: Any, *, memory_config: Any = None, dtype: Any = None) -> Any:
        """One tile of users. With a layout: ``x`` goes to the matmul's L1 width-sharded input layout and the output
        is L1 width-sharded over the same cores (L1-interleaved after a row-parallel reduce-scatter); without, as
        :meth:`forward`, into ``memory_config``."""
        bias = None if self.row_parallel else self.bias
        if self.layout is None:
            out = ttnn.linear(x, self.weight, bias=bias, activation=self.activation, dtype=dtype,
                              memory_config=memory_config)
        else:
            out = ttnn.linear(reshard(x, self.input_memory_config), self.weight, bias=bias, dtype=dtype,
                              program_config=self.decode_config, memory_config=ttnn.L1_WIDTH_SHARDED_MEMORY_CONFIG)
        return self._reduce(out)

    def _reduce(self, out: Any) -> Any:
        """A row-parallel layer's partial sums added over the chips into the fractured output, with its bias."""
        if not self.row_parallel:
            return out
        summed = reduce_scatter(out, self.device)
        ttnn.deallocate(out)
        if self.bias is None:
            return summed
        biased = ttnn.add(summed, self.bias, memory_config=summed.memory_config())
        ttnn.deallocate(summed)
        return biased
