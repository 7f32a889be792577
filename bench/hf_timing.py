"""Timing shared by the benches that set tt-models against HF transformers on the same machine (bench/mllama.py,
bench/vlm.py): sides timed in turns over rounds, and HF ``generate``'s decode steps stamped by a logits processor.
Imported as a sibling module (the benches run as scripts from bench/)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from transformers import LogitsProcessor, LogitsProcessorList, PreTrainedModel


def rounds(sides: dict[str, list[Callable[[], None]]], repeats: int) -> dict[str, list[float]]:
    """Side -> median seconds per column over ``repeats`` rounds; round 0 warms up, the sides take turns within each
    round, so a machine shared with other work loads them alike."""
    times: dict[str, list[list[float]]] = {side: [[] for _ in fns] for side, fns in sides.items()}
    for round_ in range(repeats + 1):
        for side, fns in sides.items():
            for column, fn in enumerate(fns):
                start = time.perf_counter()
                fn()
                if round_:
                    times[side][column].append(time.perf_counter() - start)
    return {side: [statistics.median(t) for t in columns] for side, columns in times.items()}


class StepStamps(LogitsProcessor):
    """Stamps every call: HF's first comes after the prefill forward, each next one after a decode step."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return scores

    def median_step(self) -> float:
        """Seconds of HF's median decode step: the median interval between two calls."""
        return statistics.median(b - a for a, b in zip(self.times, self.times[1:]))


def hf_generate(hf: PreTrainedModel, inputs: dict, pad_id: int, max_tokens: int,
                stamps: StepStamps | None = None) -> torch.Tensor:
    """HF greedy ``generate`` of exactly ``max_tokens`` tokens per row (EOS ignored)."""
    with torch.inference_mode():
        return hf.generate(**inputs, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                           eos_token_id=None, pad_token_id=pad_id,
                           logits_processor=LogitsProcessorList([stamps] if stamps else []))
