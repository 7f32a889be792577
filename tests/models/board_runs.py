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

ROOT = Path(__file__).resolve().parents[2]


def main(run_case: Callable[[Any, str, int, str], list[tuple[int, ...]]]) -> None:
    """``python -m RUNNER BOARD MODEL:TT_DATA_PARALLEL:OPTIMIZATIONS...``: prints ``ok CASE SHAPES`` per case.

    Each case gets a freshly opened mesh (reopening takes well under a second): tt-metal refuses to close a mesh
    whose submeshes are open, and to close a submesh once both it and its parent have used the command queue they
    share, so a data-parallel case closes its replicas' submeshes before the mesh runs anything again."""
    board, cases = sys.argv[1], sys.argv[2:]
    for case in cases:
        model, data_parallel, optimizations = case.rsplit(":", 2)
        device = open_device("mock", board=board)
        print("ok", case, run_case(device, model, int(data_parallel), optimizations), flush=True)
        for submesh in device.get_submeshes():
            ttnn.close_mesh_device(submesh)
        close_device(device)


def run_on_board(runner: str, board: str, cases: list[str]) -> str:
    """Run ``cases`` with ``python -m RUNNER`` on a mock ``board``; its stdout (asserting it exited cleanly)."""
    result = subprocess.run([sys.executable, "-m", runner, board, *cases], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout
