"""A mixture-of-experts feed-forward block (Qwen3-MoE, GPT-OSS), dense over the experts: every expert a chip holds
runs over every token, its hidden scaled by the token's routing weight for it (zero unless the expert is among the
token's top k), and the down projection sums the experts.

Stacked, the experts are one wide MLP: gate and up ``[dim, E * I]``, down ``[E * I, dim]``, the routing weights
``[tokens, E]`` expanded to ``[tokens, E * I]`` (a 0/1 matmul: each expert's weight over its ``I`` columns) and
multiplied into the hidden. So the block is a handful of large matmuls, what a TT card runs well, with no data-
dependent gather or scatter; exact (the unrouted experts' terms are multiplied by exactly zero); and it costs what
decode costs anyway (a 32-user step reads nearly every expert's weights; prefill pays ``E / k`` times the sparse
FLOPs). On a mesh the stacked matrices split as the dense MLP's do (:mod:`tt_models.tt.tensor_parallel`): gate, up
and the expansion column-parallel, so chip ``c`` holds experts ``c * E / N ..`` whole and computes them for every
token; down row-parallel, its partial sums reduce-scattered into the fractured residual (expert parallelism with
the collective the dense MLP already pays; tt-metal's Mixtral on a T3K likewise runs one expert a chip densely).

The router runs replicated on every chip in bfloat16, its logits padded to whole tiles with -1e4 (never routed), so
softmax, top-k and the sums read whole tiles. The k-th largest value of each row is the threshold: the experts at or
above it are the token's (ties at the threshold route to each tied expert, where HF's top-k keeps the lower index).
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn
from tt_models.tt.linear import Linear
from tt_models.tt.model_config import ExpertArgs
from tt_models.tt.tensor_parallel import TILE, chips, whole_tiles

UNROUTED_LOGIT = -1e4  # the router logit of a padding column: exp() of it is 0 in bfloat16


def routing_weights(logits: Any, experts: ExpertArgs) -> Any:
    """Each token's weight for each expert ``[.., tokens, E]`` (zero for the experts it does not route to) from the
    router's logits, in the order the family computes them."""
    k = experts.top_k
    shape = tuple(logits.shape)
    start, end = [0] * len(shape), list(shape)
    if experts.routing == "softmax_topk":
        scores = ttnn.softmax(logits, dim=-1)
    elif experts.routing == "topk_softmax":
        scores = logits
    else:
        raise ValueError(f"routing {experts.routing!r}: expected 'softmax_topk' or 'topk_softmax'")
    top, indices = ttnn.topk(scores, k=k, dim=-1)
    ttnn.deallocate(indices)
    kth = ttnn.slice(top, start[:-1] + [k - 1], end[:-1] + [k])
    chosen = ttnn.ge(scores, kth)
    ttnn.deallocate(kth)
    if experts.routing == "topk_softmax":  # softmax over the chosen: exp(logit - max) on them, zero elsewhere
        largest = ttnn.slice(top, start, end[:-1] + [1])
        shifted = ttnn.subtract(logits, largest)
        scores = ttnn.exp(shifted)
        for t in (largest, shifted):
            ttnn.deallocate(t)
    ttnn.deallocate(top)
    weights = ttnn.multiply(scores, chosen)
    ttnn.deallocate(chosen)
    if experts.routing == "topk_softmax":
        ttnn.deallocate(scores)
    if experts.routing == "softmax_topk" and not experts.normalize:
        return weights
    total = ttnn.sum(weights, dim=-1, keepdim=True)
    normalized = ttnn.divide(weights, total)
    for t in (weights, total):
        ttnn.deallocate(t)
    return normalized


class MoE:
    """The routed experts of one layer, built from HF's stacked expert weights (``{prefix}experts.gate_up_proj``,
    ``{prefix}experts.down_proj``) and router: Qwen3-MoE's ``{prefix}gate.weight`` with SwiGLU experts, GPT-OSS's
    ``{prefix}router.weight``/``bias`` with its clamped gated experts and their biases."""

    def __init__(self, state: dict[str, torch.Tensor], prefix: str, experts: ExpertArgs, device: Any,
                 weight_dtype: Any) -> None:
        n, e, hidden = chips(device), experts.n_experts, experts.hidden_dim
        if e % n or e * hidden // n % TILE:
            raise ValueError(f"{e} experts of width {hidden} cannot split over {n} chips: each chip needs the same "
                             f"number of whole experts, {TILE}-column tiles wide")
        self.experts, self.device = experts, device
        self.gpt_oss = f"{prefix}router.weight" in state
        router = f"{prefix}router." if self.gpt_oss else f"{prefix}gate."
        gate_up, down = state[f"{prefix}experts.gate_up_proj"], state[f"{prefix}experts.down_proj"]
        if self.gpt_oss:  # [E, dim, 2I] with gate and up interleaved, [E, I, dim]; biases [E, 2I], [E, dim]
            gate, up = (gate_up[..., part::2].transpose(1, 2) for part in (0, 1))
            gate_up_bias = state[f"{prefix}experts.gate_up_proj_bias"]
            gate_bias, up_bias = (gate_up_bias[:, part::2].reshape(-1) for part in (0, 1))
            down = down.transpose(1, 2)
            down_bias = state[f"{prefix}experts.down_proj_bias"]
        else:  # [E, 2I, dim] gate then up, [E, dim, I]
            gate, up = gate_up[:, :hidden], gate_up[:, hidden:]
            gate_bias = up_bias = down_bias = None
        width = whole_tiles(e)
        router_bias = torch.full((width,), UNROUTED_LOGIT)
        router_bias[:e] = state[f"{router}bias"] if self.gpt_oss else 0.0
        self.router = Linear(_pad_rows(state[f"{router}weight"], width), device, ttnn.bfloat16, bias=router_bias)
        # Chip c's experts, whole: gate/up/expansion rows and down columns in expert order, split in N blocks.
        self.gate = Linear(gate.reshape(e * hidden, -1), device, weight_dtype, bias=gate_bias,
                           activation=None if self.gpt_oss else "silu", parallel="column")
        self.up = Linear(up.reshape(e * hidden, -1), device, weight_dtype, bias=up_bias, parallel="column")
        self.down = Linear(down.transpose(0, 1).reshape(down.shape[1], -1), device, weight_dtype, parallel="row")
        expansion = torch.zeros(e * hidden, width)
        expansion[torch.arange(e * hidden), torch.arange(e * hidden) // hidden] = 1.0
        self.expansion = Linear(expansion, device, ttnn.bfloat4_b, parallel="column")  # 0 and 1 are exact there
        # GPT-OSS's down biases weighted by the routing: weights @ bias [E, dim], column-parallel into the fractured
        # residual (the down projection's partial sums reduce-scatter into the same slices).
        self.down_bias = None if down_bias is None else Linear(_pad_columns(down_bias.T, width), device,
                                                               ttnn.bfloat16, parallel="column")

    def forward(self, x: Any) -> Any:
        """``x``: replicated normed rows ``[1, 1, tokens, dim]``; the experts' routed sum, fractured on a mesh."""
        logits = self.router.forward(x, dtype=ttnn.float32)
        weights = routing_weights(logits, self.experts)
        ttnn.deallocate(logits)
        scale = self.expansion.forward(weights)
        hidden = self._activated(x)
        routed = ttnn.multiply(hidden, scale)
        for t in (hidden, scale):
            ttnn.deallocate(t)
        out = self.down.forward(routed)
        ttnn.deallocate(routed)
        if self.down_bias is not None:
            bias = self.down_bias.forward(weights)
            biased = ttnn.add(out, bias)
            for t in (out, bias):
                ttnn.deallocate(t)
            out = biased
        ttnn.deallocate(weights)
        return out

    def forward_decode(self, x: Any) -> Any:
        """One tile of users (interleaved: the experts' matmuls run on the prefill programs); DRAM-interleaved out."""
        if x.is_sharded():
            x = ttnn.sharded_to_interleaved(x, ttnn.L1_MEMORY_CONFIG)
        return self.forward(x)

    def _activated(self, x: Any) -> Any:
        """Every held expert's activated hidden ``[.., tokens, E / N * I]``: ``silu(gate) * up`` (Qwen3-MoE), or
        GptOssExperts' ``(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g)`` with ``g = clamp(gate, max=limit)``
        (``experts.swiglu``: the config's ``swiglu_alpha``, ``swiglu_limit``; 1.702 and 7 in OpenAI's)."""
        gate, up = self.gate.forward(x), self.up.forward(x)
        if not self.gpt_oss:
            hidden = ttnn.multiply(gate, up)
            for t in (gate, up):
                ttnn.deallocate(t)
            return hidden
        alpha, limit = self.experts.swiglu
        g = ttnn.clamp(gate, max=limit)
        u = ttnn.clamp(up, min=-limit, max=limit)
        for t in (gate, up):
            ttnn.deallocate(t)
        scaled = ttnn.multiply(g, alpha)
        sigmoid = ttnn.sigmoid(scaled)
        glu = ttnn.multiply(g, sigmoid)
        shifted = ttnn.add(u, 1.0)
        hidden = ttnn.multiply(shifted, glu)
        for t in (g, u, scaled, sigmoid, glu, shifted):
            ttnn.deallocate(t)
        return hidden


def _pad_rows(weight: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.nn.functional.pad(weight, (0, 0, 0, rows - weight.shape[0]))


def _pad_columns(weight: torch.Tensor, columns: int) -> torch.Tensor:
    return torch.nn.functional.pad(weight, (0, columns - weight.shape[1]))
