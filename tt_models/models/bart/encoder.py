"""BART / MBart text encoder in TT-NN: scaled token embeddings, learned positions, bidirectional layers."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.embedding import Embedding
from tt_models.tt.norm import LayerNorm
from tt_models.tt.seq2seq import Seq2SeqArgs
from tt_models.tt.seq2seq_layers import EncoderLayer
from tt_models.tt.tensor_parallel import fracture, gather


def _optional_norm(state: dict[str, torch.Tensor], prefix: str, eps: float, device: Any) -> LayerNorm | None:
    if f"{prefix}.weight" not in state:
        return None
    return LayerNorm(state[f"{prefix}.weight"], state[f"{prefix}.bias"], eps, device)


class BartEncoder:
    def __init__(self, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any, precision: Any) -> None:
        prefix = "model.encoder."
        self.args, self.device = args, device
        self.embed_tokens = Embedding(state[f"{prefix}embed_tokens.weight"], device)
        self.embed_positions = Embedding(state[f"{prefix}embed_positions.weight"], device)
        self.embedding_norm = _optional_norm(state, f"{prefix}layernorm_embedding", args.eps, device)
        self.layers = [EncoderLayer(args, state, f"{prefix}layers.{i}.", device, precision)
                       for i in range(args.encoder_layers)]
        self.final_norm = _optional_norm(state, f"{prefix}layer_norm", args.eps, device)  # MBart

    def forward(self, input_ids: torch.Tensor) -> Any:
        """Token ids ``[S]`` -> encoder states ``[1, 1, S, dim]`` (replicated over a mesh)."""
        length = input_ids.shape[0]
        if not 0 < length <= self.args.max_source_positions:
            raise ValueError(f"encoder input of {length} tokens: BART takes 1 to {self.args.max_source_positions}")
        x = self.embed_tokens.forward(input_ids)
        if self.args.embed_scale != 1.0:
            x = ttnn.multiply(x, self.args.embed_scale)
        x = ttnn.add(x, self.embed_positions.forward(torch.arange(length) + self.args.position_offset))
        if self.embedding_norm is not None:
            x = fracture(self.embedding_norm.forward(x), self.device)
        for layer in self.layers:
            x = layer.forward(x)
        # Whole rows on every chip: the cross K/V projections are column-parallel.
        return gather(x, self.device) if self.final_norm is None else self.final_norm.forward(x)
