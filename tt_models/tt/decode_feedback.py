"""Device-side token feedback: decode step N+1 is enqueued before step N's tokens are read.

TT vLLM's async decode (``supports_async_decode``) submits a decode step while the previous one's output is still
on the device, so the host's ``tokens`` and ``start_pos`` lag one step behind. With device sampling it says
``reset_batch=False`` when the batch layout is unchanged since the previous decode: the model must then take each
row's token from what the device sampled last and advance its position by one itself, ignoring the host's values
(sending those stale rows would repeat the previous token: "token doubling", tt-metal#47359). Any change of layout
(a row joining, leaving or moving: ``slot_remap``) comes with ``reset_batch=True``, and the host's inputs are whole
again.

The sampled tokens never leave the device: a ``ttnn.copy`` writes them into the step's token input (a captured
trace's persistent one) before the step runs. Positions are deterministic, so the host keeps a mirror of them and
builds every position-derived input (rotary rows, M-RoPE's position plus delta, learned position ids, masks) from
it as in a synchronous step, without reading anything back; page tables come from the host, as the runner keeps
them current. Every family's step advances its positions and rotary indices (learned position ids) on the device
itself (``ttnn.plus_one``, cos/sin rows looked up there), so a replayed trace's copies of them, like those of unchanged
page tables, are skipped (:mod:`tt_models.tt.decode_trace`): the host copies only the sampling inputs and what
changed.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.runtime import ttnn

FED = "tokens"  # the decode input the device writes; every family names its token ids so


class DecodeFeedback:
    """One generator's feedback state: the positions of its last decode step (host mirror) and each replica's
    last sampled device tokens."""

    def __init__(self, replicas: int) -> None:
        self.positions: torch.Tensor | None = None
        self.sampled: list[Any] = [None] * replicas
        self.active = False  # the current step takes its tokens from the device
        self.steps = 0  # steps that did (tests count them)

    def positions_of(self, start_pos: torch.Tensor, sampling_params: Any, reset_batch: bool | None) -> torch.Tensor:
        """This step's positions: the host's (``reset_batch`` True or not given, host sampling, or nothing sampled on
        the device yet), else the last step's plus one (padding rows stay ``-1``)."""
        last = self.positions
        self.active = (sampling_params is not None and reset_batch is False and last is not None
                       and all(s is not None for s in self.sampled))
        positions = torch.where(last >= 0, last + 1, last) if self.active else start_pos
        self.steps += self.active
        self.positions = positions
        return positions

    def feed(self, replica: int, device_inputs: dict[str, Any]) -> None:
        """Write the replica's last sampled tokens (``[1, 1, 32, 1]``) into this step's token input (``[1, 32]``)."""
        tokens = device_inputs[FED]
        ttnn.copy(ttnn.reshape(self.sampled[replica], tuple(tokens.shape)), tokens)

    def record(self, outputs: list[Any], sampled: bool) -> None:
        """Keep each replica's sampled device tokens (outputs ``(tokens, log_probs)``) for the next step; a step
        sampled on the host leaves nothing to feed back."""
        self.sampled = [out[0] for out in outputs] if sampled else [None] * len(outputs)
