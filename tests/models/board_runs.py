"""Running a family's cases on one mock board in a subprocess: the mock cluster is a process singleton, so a board
other than the tests' n150 needs a process of its own, and one process runs several cases to pay its start-up once.

A runner module's ``__main__`` calls :func:`main` with its ``run_case(device, model, data_parallel, optimizations)``;
the test calls :func:`run_on_board` with cases ``MODEL:TT_DATA_PARALLEL:OPTIMIZATIONS``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import ttnn

from tt_models.runtime import close_device, open_device
from tt_models.tt.model_config import PROFILES

ROOT = Path(__file__).resolve().parents[2]


def main(run_case: Callable[[Any, str, int, str], list[tuple[int, ...]]]) -> None:
    """``python -m RUNNER BOARD MODEL:TT_DATA_PARALLEL:OPTIMIZATIONS...``: prints ``ok CASE SHAPES`` per case.

    Each case gets a freshly opened mesh (reopening takes well under a second), so the mesh a data-parallel case split
    into submeshes never runs again: tt-metal refuses to close a submesh once both it and its parent have used the
    command queue they share, and to reopen a mesh (set its fabric) while a submesh is still open. So the submeshes
    close first, then the mesh."""
    board, cases = sys.argv[1], sys.argv[2:]
    for case in cases:
        model, data_parallel, optimizations = case.rsplit(":", 2)
        device = open_device("mock", board=board)
        print("ok", case, run_case(device, model, int(data_parallel), optimizations), flush=True)
        for submesh in device.get_submeshes():
            ttnn.close_mesh_device(submesh)
        close_device(device)


# The costly boards' runs: each runs both profiles and both data-parallel widths, each pair of the two once over the
# two boards (a Latin square); the n150 tests run every profile on one chip.
SQUARE = {"n300": [(1, "accuracy"), (2, "performance")], "t3k": [(1, "performance"), (2, "accuracy")]}


def cases(model: str, board: str | None = None) -> list[str]:
    """``model`` as one replica tensor-parallel over the whole mesh and as two replicas over its halves
    (tt_data_parallel=2): in both profiles, or (``board``) in that board's half of :data:`SQUARE`."""
    pairs = SQUARE[board] if board else [(data_parallel, profile) for data_parallel in (1, 2) for profile in PROFILES]
    return [f"{model}:{data_parallel}:{profile}" for data_parallel, profile in pairs]


def run_on_board(runner: str, board: str, cases: list[str]) -> str:
    """Run ``cases`` with ``python -m RUNNER`` on a mock ``board``; its stdout (asserting it exited cleanly)."""
    result = subprocess.run([sys.executable, "-m", runner, board, *cases], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout
