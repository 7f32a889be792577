"""Gated feed-forward (SwiGLU: ``w2(silu(w1 x) * w3 x)``) of the Llama family."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.weights import as_bias, as_linear_weight


class MLP:
    def __init__(self, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any) -> None:
        self.w1 = as_linear_weight(state[f"{prefix}gate_proj.weight"], device, weight_dtype)
        self.w3 = as_linear_weight(state[f"{prefix}up_proj.weight"], device, weight_dtype)
        self.w2 = as_linear_weight(state[f"{prefix}down_proj.weight"], device, weight_dtype)

    def forward(self, x: Any, memory_config: Any = None) -> Any:
        gate = ttnn.linear(x, self.w1, activation="silu", memory_config=memory_config)
        up = ttnn.linear(x, self.w3, memory_config=memory_config)
        hidden = ttnn.multiply(gate, up, memory_config=memory_config)
        ttnn.deallocate(gate)
        ttnn.deallocate(up)
        out = ttnn.linear(hidden, self.w2, memory_config=memory_config)
        ttnn.deallocate(hidden)
        return out


class FeedForward:
    """``fc2(act(fc1 x))`` with biases (Whisper, BART)."""

    def __init__(self, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any,
                 activation: str) -> None:
        self.fc1 = as_linear_weight(state[f"{prefix}fc1.weight"], device, weight_dtype)
        self.b1 = as_bias(state[f"{prefix}fc1.bias"], device)
        self.fc2 = as_linear_weight(state[f"{prefix}fc2.weight"], device, weight_dtype)
        self.b2 = as_bias(state[f"{prefix}fc2.bias"], device)
        self.activation = activation

    def forward(self, x: Any) -> Any:
        hidden = ttnn.linear(x, self.fc1, bias=self.b1, activation=self.activation)
        out = ttnn.linear(hidden, self.fc2, bias=self.b2)
        ttnn.deallocate(hidden)
        return out
