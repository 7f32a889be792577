"""On-device sampling of one replica's 32 decode rows (as tt-metal's ``models/common/sampling``).

``TTSamplingParams`` (TT vLLM's per-row lists) become host inputs of the device forward (:class:`SamplingBatch`);
:class:`TTSampling` turns the replica's logits ``[1, 1, 32, V]`` into tokens, and the sampled tokens'
log-probabilities when a row asks for them, with ttnn ops only, so it runs inside a decode trace:

- penalties (vLLM's rules): repetition divides positive / multiplies negative logits of tokens seen in the
  prompt or output, frequency subtracts ``count * f``, presence subtracts ``p`` once per output token seen;
- all rows greedy: ``ttnn.argmax`` over the float32 logits (the token host argmax picks);
- otherwise ``ttnn.topk`` (32 candidates, ties to the lower index) then ``ttnn.sampling`` with per-row
  ``k`` (``top_k`` clamped to 32, TT's candidate set), ``p`` and ``temp = 1/T``; greedy rows there get
  ``k = 1, p = 0`` (the first candidate: the argmax). Each row's random number comes from its core's PRNG,
  seeded in the trace (``ttnn.manual_seed``) from the request's seed and the row's position, so a seeded
  request draws the same numbers whatever batch it runs in;
- log-probs: ``log(softmax(raw logits))`` at the sampled token (vLLM's raw log-probs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from tt_models.runtime import ttnn, use
from tt_models.tt.decode_inputs import HostInputs, host_ints, host_tensor, tracked_ints, tracked_tensor
from tt_models.tt.weights import mesh_mapper

ROWS = 32
MAX_TOP_K = 32  # ttnn.sampling's candidate set
_SEED_MIX = 0x9E3779B1


@dataclass(frozen=True)
class SamplingMode:
    """What the device forward computes (one captured trace per mode)."""

    sample: bool  # some row is not greedy (else argmax only)
    penalties: bool
    log_probs: bool


def _per_row(values: Any, n: int, default: Any) -> list[Any]:
    """A ``TTSamplingParams`` field as ``n`` values (lists from TT vLLM, scalars from its V0 runner)."""
    if values is None:
        return [default] * n
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        return [values] * n
    values = list(values)
    if len(values) < n:
        values += [default] * (n - len(values))
    return values[:n]


@dataclass
class SamplingBatch:
    """One replica's rows of ``TTSamplingParams``, normalised as the device sampler takes them."""

    greedy: list[bool]
    top_k: list[int]
    top_p: list[float]
    inv_temperature: list[float]
    seeds: list[int]
    presence: list[float]
    frequency: list[float]
    repetition: list[float]
    log_probs: list[bool]

    @classmethod
    def of(cls, params: Any, rows: Sequence[int], positions: Sequence[int], vocab_size: int,
           rng: random.Random) -> "SamplingBatch":
        """``rows``: indices into the parameter lists (``-1``: a padding row, greedy); ``positions``: each row's
        last input position (seeds a seeded row's draw)."""
        n = max(rows, default=-1) + 1

        def field(name: str, default: Any) -> list[Any]:
            values = _per_row(getattr(params, name, None), n, default)
            return [values[r] if r >= 0 else default for r in rows]

        temperature = field("temperature", 0.0)
        top_k = [int(k) for k in field("top_k", 1)]
        greedy = [t <= 0.0 or k == 1 for t, k in zip(temperature, top_k)]
        enable = field("enable_log_probs", None)
        num = field("num_logprobs", None)
        log_probs = [bool(e) if e is not None else (x is not None and x >= 0) for e, x in zip(enable, num)]
        seeds = []
        for seed, position in zip(field("seed", None), positions):
            # 31 bits: the int32 torch tensor the UINT32 input is made from holds them
            seeds.append(rng.getrandbits(31) if seed is None or seed < 0
                         else (int(seed) * _SEED_MIX + int(position)) & 0x7FFFFFFF)
        return cls(
            greedy=greedy,
            top_k=[1 if g else (MAX_TOP_K if not 0 < k < vocab_size else min(k, MAX_TOP_K))
                   for g, k in zip(greedy, top_k)],
            top_p=[0.0 if g else min(max(float(p), 0.0), 1.0) for g, p in zip(greedy, field("top_p", 1.0))],
            inv_temperature=[1.0 if g else 1.0 / float(t) for g, t in zip(greedy, temperature)],
            seeds=seeds,
            presence=[float(x) for x in field("presence_penalty", 0.0)],
            frequency=[float(x) for x in field("frequency_penalty", 0.0)],
            repetition=[float(x) for x in field("repetition_penalty", 1.0)],
            log_probs=log_probs,
        )

    @property
    def mode(self) -> SamplingMode:
        penalties = any(p != 0.0 for p in self.presence + self.frequency) or any(r != 1.0 for r in self.repetition)
        return SamplingMode(sample=not all(self.greedy), penalties=penalties, log_probs=any(self.log_probs))

    def host_inputs(self, device: Any, vocab_size: int, prompt_tokens: list[torch.Tensor | None] | None = None,
                    output_tokens: list[torch.Tensor | None] | None = None) -> HostInputs:
        """The inputs of this mode, padded to 32 rows; ``prompt_tokens`` / ``output_tokens``: per row the token
        ids seen so far (``None`` or ``-1`` entries: none), needed when penalties are on."""
        pad = ROWS - len(self.greedy)
        mode = self.mode
        inputs: HostInputs = {}
        if mode.sample:
            # A row's parameters are its request's: a trace copies them only when the batch changed.
            inputs["k"] = tracked_ints(torch.tensor(self.top_k + [1] * pad), device, ttnn.uint32)
            inputs["p"] = _row_vector(self.top_p + [0.0] * pad, device)
            inputs["temp"] = _row_vector(self.inv_temperature + [1.0] * pad, device)
            inputs["seeds"] = host_ints(torch.tensor(self.seeds + [0] * pad, dtype=torch.int64), device, ttnn.uint32)
        if mode.penalties:
            counts, seen = token_counts(len(self.greedy), vocab_size, prompt_tokens, output_tokens)
            inputs["output_counts"] = host_tensor(counts[None, None], device, dtype=ttnn.float32)
            inputs["seen"] = host_tensor(seen[None, None], device, dtype=ttnn.float32)  # where: one dtype
            for name, values, default in (("repetition", self.repetition, 1.0), ("frequency", self.frequency, 0.0),
                                          ("presence", self.presence, 0.0)):
                column = torch.tensor(values + [default] * pad).reshape(1, 1, ROWS, 1)
                inputs[name] = host_tensor(column, device, dtype=ttnn.float32)
            inv = torch.tensor([1.0 / r for r in self.repetition] + [1.0] * pad).reshape(1, 1, ROWS, 1)
            inputs["inv_repetition"] = host_tensor(inv, device, dtype=ttnn.float32)
        return inputs


def token_counts(rows: int, vocab_size: int, prompt_tokens: list[torch.Tensor | None] | None,
                 output_tokens: list[torch.Tensor | None] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: how often each token occurs in the output ``[32, V]``, and 1 where it occurs in prompt or output."""
    counts = torch.zeros(ROWS, vocab_size)
    seen = torch.zeros(ROWS, vocab_size)
    for row in range(rows):
        for source, target in ((output_tokens, counts), (prompt_tokens, seen)):
            ids = None if source is None else source[row]
            if ids is None:
                continue
            ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
            ids = ids[(ids >= 0) & (ids < vocab_size)]
            target[row].index_add_(0, ids, torch.ones(len(ids)))
    seen = ((seen + counts) > 0).float()
    return counts, seen


def _row_vector(values: list[float], device: Any) -> Any:
    """Per-row parameters (constant while the batch is): tracked, as ``k``."""
    return tracked_tensor(torch.tensor(values), device, dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT)


class TTSampling:
    """The device side: constant user ids for the per-core PRNGs, and the sampling ops."""

    def __init__(self, device: Any) -> None:
        self.device = device
        with use(device):  # the device's own ttnn, whatever was opened last
            self.user_ids = ttnn.from_torch(torch.arange(ROWS, dtype=torch.int32), dtype=ttnn.uint32,
                                            layout=ttnn.ROW_MAJOR_LAYOUT, device=device,
                                            mesh_mapper=mesh_mapper(device))

    def forward(self, logits: Any, mode: SamplingMode, inputs: dict[str, Any]) -> tuple[Any, Any]:
        """Tokens (UINT32, one per row) and, with ``mode.log_probs``, their log-probs ``[1, 1, 32, 1]``."""
        raw = logits
        if mode.penalties:
            logits = self.apply_penalties(logits, inputs)
        if mode.sample:
            values, indices = ttnn.topk(logits, k=MAX_TOP_K, dim=-1)
            values = ttnn.typecast(values, ttnn.bfloat16)
            indices = ttnn.to_layout(indices, ttnn.ROW_MAJOR_LAYOUT)
            ttnn.manual_seed(inputs["seeds"], user_ids=self.user_ids)
            tokens = ttnn.sampling(values, indices, inputs["k"], inputs["p"], inputs["temp"])
            tokens = ttnn.reshape(tokens, (1, 1, ROWS, 1))
        else:
            tokens = ttnn.argmax(logits, dim=3, keepdim=True)
        log_probs = None
        if mode.log_probs:
            index = ttnn.to_layout(tokens, ttnn.TILE_LAYOUT)
            log_probs = ttnn.log(ttnn.gather(ttnn.softmax(raw, dim=-1), 3, index))
        return tokens, log_probs

    @staticmethod
    def apply_penalties(logits: Any, inputs: dict[str, Any]) -> Any:
        factor = ttnn.where(ttnn.gt(logits, 0.0), inputs["inv_repetition"], inputs["repetition"])
        logits = ttnn.multiply(logits, ttnn.where(inputs["seen"], factor, 1.0))
        logits = ttnn.subtract(logits, ttnn.multiply(inputs["output_counts"], inputs["frequency"]))
        seen_output = ttnn.gt(inputs["output_counts"], 0.0)
        return ttnn.subtract(logits, ttnn.multiply(seen_output, inputs["presence"]))
