"""Rows of a step's host logits ``[B, V]`` copied out: the rows some step changes, and the rows sampled at random,
divided by their temperatures on the way (one pass over each row where a copy and then a division would take two)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def take_rows(x: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
    """``x[rows]``, a copy per row: numpy's ``take`` for host float32 (1.5x ``index_select``, 7x indexing by a list
    over ``[B, V]``), ``index_select`` otherwise."""
    if x.dtype == torch.float32 and x.device.type == "cpu" and x.is_contiguous():
        return torch.from_numpy(np.take(x.numpy(), rows, axis=0))
    return x.index_select(0, torch.tensor(rows, dtype=torch.int64))


def subset(x: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """``x``'s rows ``rows``: ``x`` itself when they are all of them, in order."""
    return x if rows == list(range(x.shape[0])) else take_rows(x, rows)


def rows_divided(x: torch.Tensor, rows: list[int], temperatures: list[float] | None) -> torch.Tensor:
    """``x``'s rows ``rows`` divided by ``temperatures``, in a copy (None: as they are, ``x`` itself when they are
    all of its rows)."""
    return subset(x, rows) if temperatures is None else scaled_rows(x, rows, temperatures)


def scaled_rows(logits: torch.Tensor, rows: list[int], temperatures: list[float]) -> torch.Tensor:
    """A copy of ``logits``' rows ``rows``, each divided by its temperature: one pass over each row for host float32
    (the copy and the division together; the same float32 division as ``div_``), else a copy divided in place."""
    if not (logits.dtype == torch.float32 and logits.device.type == "cpu"):
        return divide(take_rows(logits, rows), temperatures)
    values = logits.numpy()
    scaled = np.empty((len(rows), values.shape[1]), dtype=np.float32)
    for j, (row, temperature) in enumerate(zip(rows, temperatures)):
        if temperature == 1.0:
            scaled[j] = values[row]
        else:
            np.divide(values[row], np.float32(temperature), out=scaled[j])
    return torch.from_numpy(scaled)


def divide(logits: torch.Tensor, temperatures: list[float]) -> torch.Tensor:
    """``logits`` (the caller's copy) with each row divided in place by its temperature."""
    if any(t != 1.0 for t in temperatures):  # (a division by 1 changes nothing: a pass over the rows saved)
        logits.div_(torch.tensor(temperatures, dtype=torch.float32)[:, None])
    return logits
