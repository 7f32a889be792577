"""A hidden size that does not split over a mesh into whole tiles, zero-padded until it does, as tt-metal pads
GPT-OSS's 2880 (90 tiles) on 4 or 8 chips.

The fractured residual (:mod:`tt_models.tt.tensor_parallel`) gives each chip ``dim / N`` columns in whole tiles, so
``dim`` is padded to the next multiple of ``32 x N`` with channels that stay exactly zero: every weight that reads the
residual gets zero input features there (embedding columns, Q/K/V, the router, the experts' and the MLP's gate and
up, the LM head) and every weight that writes it zero outputs (the attention and MLP output projections, the experts'
down projections, their biases). The residual RMSNorms then see the real channels and zeros, and divide by the padded
width: with ``c = dim / padded``, ``mean_padded(x^2) = c * mean(x^2)``, so

    ``sqrt(mean_padded(x^2) + c * eps) = sqrt(c) * sqrt(mean(x^2) + eps)``

and the norm is exact with its weight multiplied by ``sqrt(c)`` and its epsilon by ``c`` (its weight zero on the
padding, which keeps the padded channels zero). Per-head norms (Qwen3's Q/K norms) and attention heads are not
touched, so the KV cache's per-chip shape is the unpadded model's.

The padding is done once, where the weights are read (:class:`PaddedState`, a view of the HF state dict padding each
weight as a block takes it, so no second copy of the model is held); a hidden size that splits is left alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import torch

from tt_models.tt.model_config import DecoderArgs
from tt_models.tt.tensor_parallel import TILE

# The residual's RMSNorms (HF names' endings).
RESIDUAL_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "model.norm.weight")
# Weights holding the hidden size in one fixed dimension: nn.Linear weights ``[out, in]`` read it in dimension -1,
# write it in 0 (biases: their only one).
HIDDEN_DIM_OF = {
    "embed_tokens.weight": -1, "lm_head.weight": -1,
    "q_proj.weight": -1, "k_proj.weight": -1, "v_proj.weight": -1, "o_proj.weight": 0, "o_proj.bias": 0,
    "gate_proj.weight": -1, "up_proj.weight": -1, "down_proj.weight": 0, "down_proj.bias": 0,
    "mlp.gate.weight": -1, "mlp.router.weight": -1,  # routers ``[E, dim]`` (Qwen3-MoE, GPT-OSS)
    "experts.down_proj_bias": -1,  # GPT-OSS ``[E, dim]``
}
# Stacked experts, by layout: GPT-OSS's ``x @ W`` (gate_up ``[E, dim, 2I]``, down ``[E, I, dim]``), Qwen3-MoE's
# ``W @ x`` (gate_up ``[E, 2I, dim]``, down ``[E, dim, I]``).
EXPERTS_HIDDEN_DIM = {"experts.gate_up_proj": (1, 2), "experts.down_proj": (2, 1)}


@dataclass(frozen=True)
class HiddenPadding:
    """The hidden size ``dim`` zero-padded to ``padded`` channels."""

    dim: int
    padded: int

    @classmethod
    def of(cls, dim: int, chips: int) -> "HiddenPadding | None":
        """The padding ``dim`` needs to split over ``chips`` into whole tiles; None when it splits."""
        unit = chips * TILE
        return None if dim % unit == 0 else cls(dim, -(-dim // unit) * unit)

    @property
    def real_share(self) -> float:
        """``c``: the real channels' share of the padded width."""
        return self.dim / self.padded

    def args(self, args: DecoderArgs) -> DecoderArgs:
        """``args`` with the padded width and its residual norms' epsilon."""
        return replace(args, dim=self.padded, residual_norm_eps=args.residual_norm_eps * self.real_share)

    def state(self, state: Mapping[str, torch.Tensor]) -> "PaddedState":
        return PaddedState(state, self)

    def weight(self, name: str, t: torch.Tensor, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """HF weight ``name`` padded (``state``: the whole checkpoint, telling an expert layout apart)."""
        if name.endswith(RESIDUAL_NORMS):
            return self._pad(t.float() * math.sqrt(self.real_share), 0).to(t.dtype)
        for ending, dim in HIDDEN_DIM_OF.items():
            if name.endswith(ending):
                return self._pad(t, dim)
        for ending, (x_at_w, w_at_x) in EXPERTS_HIDDEN_DIM.items():
            if name.endswith(ending):
                gpt_oss = f"{name[:-len(ending)]}router.weight" in state
                return self._pad(t, x_at_w if gpt_oss else w_at_x)
        return t

    def _pad(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        if t.shape[dim] != self.dim:
            raise ValueError(f"a weight of shape {tuple(t.shape)} should have the hidden size {self.dim} in "
                             f"dimension {dim}")
        shape = list(t.shape)
        shape[dim] = self.padded - self.dim
        return torch.cat([t, t.new_zeros(shape)], dim=dim)


class PaddedState(Mapping):
    """An HF state dict whose weights come out padded (:meth:`HiddenPadding.weight`) as they are read."""

    def __init__(self, state: Mapping[str, torch.Tensor], padding: HiddenPadding) -> None:
        self.state, self.padding = state, padding

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.padding.weight(name, self.state[name], self.state)

    def __contains__(self, name: object) -> bool:  # without padding the weight, as Mapping's would
        return name in self.state

    def __iter__(self) -> Iterator[str]:
        return iter(self.state)

    def __len__(self) -> int:
        return len(self.state)
