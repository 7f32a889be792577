"""Whisper's audio encoder in TT-NN: two convolutions, sinusoidal positions, bidirectional layers.

The convolutions run as matmuls. conv1 (kernel 3, stride 1) takes the log-mel frames as input, so its
windows are gathered on the host (input preparation, as tt-metal's Whisper prepares features). conv2
(kernel 3, stride 2) reads conv1's device output: viewing frames ``[T, d]`` as pairs ``[T/2, 2d]``, output
``t`` is ``W1 h[2t] + W2 h[2t+1]`` (one matmul) plus ``W0 h[2t-1]``, the previous pair's second half
(another matmul, shifted down one row). On a mesh conv1 is replicated and conv2 column-parallel, so the residual
stream starts fractured, as after a token embedding.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.norm import LayerNorm
from tt_models.tt.seq2seq import Seq2SeqArgs
from tt_models.tt.seq2seq_layers import EncoderLayer
from tt_models.tt.tensor_parallel import chips
from tt_models.tt.weights import as_bias, as_linear_weight, as_tensor


class WhisperEncoder:
    def __init__(self, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any, precision: Any) -> None:
        prefix = "model.encoder."
        self.args, self.device = args, device
        conv1, conv2 = state[f"{prefix}conv1.weight"], state[f"{prefix}conv2.weight"]  # [d, in, 3]
        self.n_mels = conv1.shape[1]
        self.conv1 = as_linear_weight(conv1.reshape(conv1.shape[0], -1), device, ttnn.bfloat16)
        self.conv1_bias = as_bias(state[f"{prefix}conv1.bias"], device)
        self.conv2_pair = as_linear_weight(torch.cat([conv2[:, :, 1], conv2[:, :, 2]], dim=1), device, ttnn.bfloat16,
                                           shard_dim=-1)
        self.conv2_prev = as_linear_weight(torch.cat([torch.zeros_like(conv2[:, :, 0]), conv2[:, :, 0]], dim=1),
                                           device, ttnn.bfloat16, shard_dim=-1)
        self.conv2_bias = as_bias(state[f"{prefix}conv2.bias"], device, shard_dim=-1)
        self.zero_row = as_tensor(torch.zeros(1, 1, 1, args.dim), device, shard_dim=-1)
        positions = state[f"{prefix}embed_positions.weight"][: args.max_source_positions]
        self.positions = as_tensor(positions[None, None], device, shard_dim=-1)
        self.layers = [EncoderLayer(args, state, f"{prefix}layers.{i}.", device, precision)
                       for i in range(args.encoder_layers)]
        self.norm = LayerNorm(state[f"{prefix}layer_norm.weight"], state[f"{prefix}layer_norm.bias"], args.eps, device)

    def forward(self, input_features: torch.Tensor) -> Any:
        """Log-mel ``[n_mels, 2 * S]`` -> encoder states ``[1, 1, S, dim]`` (S = max_source_positions; replicated
        over a mesh)."""
        frames = input_features.shape[-1]
        if input_features.shape[0] != self.n_mels or frames != 2 * self.args.max_source_positions:
            raise ValueError(f"Whisper expects input_features of shape [{self.n_mels}, "
                             f"{2 * self.args.max_source_positions}], got {list(input_features.shape)}")
        windows = torch.nn.functional.pad(input_features.float(), (1, 1)).unfold(1, 3, 1)  # [n_mels, T, 3]
        windows = windows.permute(1, 0, 2).reshape(1, 1, frames, -1)
        x = ttnn.linear(as_tensor(windows, self.device), self.conv1, bias=self.conv1_bias, activation="gelu")
        length, dim = frames // 2, self.args.dim
        pairs = ttnn.reshape(x, (1, 1, length, 2 * dim))
        ttnn.deallocate(x)
        current = ttnn.linear(pairs, self.conv2_pair, bias=self.conv2_bias)
        previous = ttnn.linear(pairs, self.conv2_prev)
        ttnn.deallocate(pairs)
        columns = dim // chips(self.device)  # conv2's output columns on each chip
        shifted = ttnn.concat([self.zero_row, ttnn.slice(previous, (0, 0, 0, 0), (1, 1, length - 1, columns))], dim=2)
        x = ttnn.gelu(ttnn.add(current, shifted))
        x = ttnn.add(x, self.positions)
        for layer in self.layers:
            x = layer.forward(x)
        return self.norm.forward(x)
