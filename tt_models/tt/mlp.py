"""Feed-forward blocks: the gated SwiGLU of the Llama family and the ``fc2(act(fc1 x))`` of Whisper and BART.

``forward`` takes interleaved rows (prefill, encoders); ``forward_decode`` one tile of users on the decode
layouts the block was built with (:class:`DecodeConfigs`): L1 width-sharded in and out when they are sharded.
On a mesh the first projections are column-parallel and the last row-parallel: replicated in, fractured out.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs
from tt_models.tt.linear import Linear


class MLP:
    """``w2(act(w1 x) * w3 x)``, with the projections' biases where the checkpoint has them (Qwen2.5-VL's vision
    blocks); ``act`` is silu (SwiGLU) or Gemma's ``gelu_tanh``."""

    def __init__(self, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any,
                 decode: DecodeConfigs, activation: str = "silu") -> None:
        self.w1 = Linear(state[f"{prefix}gate_proj.weight"], device, weight_dtype, activation=activation,
                         bias=state.get(f"{prefix}gate_proj.bias"), layout=decode.mlp_in, parallel="column")
        self.w3 = Linear(state[f"{prefix}up_proj.weight"], device, weight_dtype,
                         bias=state.get(f"{prefix}up_proj.bias"), layout=decode.mlp_in, parallel="column")
        self.w2 = Linear(state[f"{prefix}down_proj.weight"], device, weight_dtype,
                         bias=state.get(f"{prefix}down_proj.bias"), layout=decode.mlp_out, parallel="row")

    def forward(self, x: Any) -> Any:
        return self._forward(x, decode=False)

    def forward_decode(self, x: Any) -> Any:
        return self._forward(x, decode=True)

    def _forward(self, x: Any, decode: bool) -> Any:
        gate = self.w1.forward_decode(x) if decode else self.w1.forward(x)
        up = self.w3.forward_decode(x) if decode else self.w3.forward(x)
        hidden = ttnn.multiply(gate, up, memory_config=gate.memory_config())
        ttnn.deallocate(gate)
        ttnn.deallocate(up)
        out = self.w2.forward_decode(hidden) if decode else self.w2.forward(hidden)
        ttnn.deallocate(hidden)
        return out


class FeedForward:
    """``fc2(act(fc1 x))`` with biases (Whisper, BART, Mllama's vision encoder)."""

    def __init__(self, state: dict[str, torch.Tensor], prefix: str, device: Any, weight_dtype: Any,
                 activation: str, decode: DecodeConfigs | None = None) -> None:
        """``decode``: the decoder's layouts (None in encoders, which never decode)."""
        decode = decode or DecodeConfigs.interleaved()
        self.fc1 = Linear(state[f"{prefix}fc1.weight"], device, weight_dtype, bias=state[f"{prefix}fc1.bias"],
                          activation=activation, layout=decode.mlp_in, parallel="column")
        self.fc2 = Linear(state[f"{prefix}fc2.weight"], device, weight_dtype, bias=state[f"{prefix}fc2.bias"],
                          layout=decode.mlp_out, parallel="row")

    def forward(self, x: Any) -> Any:
        hidden = self.fc1.forward(x)
        out = self.fc2.forward(hidden)
        ttnn.deallocate(hidden)
        return out

    def forward_decode(self, x: Any) -> Any:
        hidden = self.fc1.forward_decode(x)
        out = self.fc2.forward_decode(hidden)
        ttnn.deallocate(hidden)
        return out
