"""The mock multi-chip boards tensor parallelism runs on: a Wormhole T3K (1x8 mesh) and four Blackhole p150s (1x4)
open with fabric, and the collectives (all_gather, reduce_scatter, all_reduce) run on tensors sharded over the mesh.

The mock cluster is a process singleton (this process holds an n150), so ``python -m tests.mock.test_mesh_boards
<board>`` runs the ops on a board in a fresh process and prints one ``RESULT <json>`` line, as
``tests.mock.mesh_parity`` does for the n300. The mock device reads back zeros: only shapes are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import ttnn

from tt_models.runtime import close_device, open_device

pytestmark = pytest.mark.mock

REPO = Path(__file__).resolve().parents[2]


def run(board: str) -> dict:
    mesh = open_device("mock", board=board)
    result = {"num_devices": mesh.get_num_devices(), "mesh_shape": list(mesh.shape),
              "fabric": ttnn.get_fabric_config().name}
    if board == "t3k":  # before the parent runs anything (see tensor_parallel_halves)
        result["halves"] = tensor_parallel_halves(mesh)
    result["ops"] = collectives(mesh)
    close_device(mesh)
    result["fabric_after_close"] = ttnn.get_fabric_config().name
    return result


def collectives(mesh) -> dict[str, list[int]]:
    """Per-chip shapes of a tensor-parallel step: shard the hidden dim, gather it, reduce-scatter and all-reduce
    partial sums, a matmul on the gathered activations, and the shards concatenated back on the host."""
    n = mesh.get_num_devices()

    def put(shape, mapper):
        return ttnn.from_torch(torch.randn(shape), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mesh,
                               mesh_mapper=mapper)

    x = put((1, 1, 32, 32 * n), ttnn.ShardTensorToMesh(mesh, dim=3))
    partial = put((1, 1, 32, 32 * n), ttnn.ReplicateTensorToMesh(mesh))
    gathered = ttnn.all_gather(x, dim=3)
    out = {"sharded": x, "all_gather": gathered, "reduce_scatter": ttnn.reduce_scatter(partial, dim=3),
           "all_reduce": ttnn.all_reduce(partial),
           "matmul": ttnn.matmul(gathered, put((32 * n, 64), ttnn.ReplicateTensorToMesh(mesh)))}
    shapes = {name: list(tensor.shape) for name, tensor in out.items()}
    shapes["to_torch"] = list(ttnn.to_torch(x, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=3)).shape)
    return shapes


def tensor_parallel_halves(mesh) -> list[dict]:
    """Two 1x4 submeshes, an all_gather on each. tt-metal refuses to close a submesh once both it and its parent
    have used the command queue they share, so this runs first and closes them before the parent is used."""
    halves = mesh.create_submeshes(ttnn.MeshShape(1, 4))
    results = []
    for half in halves:
        x = ttnn.from_torch(torch.randn(1, 1, 32, 128), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=half,
                            mesh_mapper=ttnn.ShardTensorToMesh(half, dim=3))
        results.append({"num_devices": half.get_num_devices(), "all_gather": list(ttnn.all_gather(x, dim=3).shape)})
    for half in halves:
        ttnn.close_mesh_device(half)
    return results


def expected(n: int) -> dict[str, list[int]]:
    return {"sharded": [1, 1, 32, 32], "all_gather": [1, 1, 32, 32 * n], "reduce_scatter": [1, 1, 32, 32],
            "all_reduce": [1, 1, 32, 32 * n], "matmul": [1, 1, 32, 64], "to_torch": [1, 1, 32, 32 * n]}


@pytest.mark.parametrize("board, n", [("t3k", 8), ("p150x4", 4)])
def test_collectives_on_a_mock_board(board, n):
    proc = subprocess.run([sys.executable, "-m", "tests.mock.test_mesh_boards", board], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout[-3000:]
    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result.pop("ops") == expected(n)
    halves = [{"num_devices": 4, "all_gather": [1, 1, 32, 128]}] * 2
    assert result == {"num_devices": n, "mesh_shape": [1, n], "fabric": "FABRIC_1D", "fabric_after_close": "DISABLED",
                      **({"halves": halves} if board == "t3k" else {})}


def test_a_board_opens_only_as_its_mesh():
    with pytest.raises(ValueError, match=r"board t3k opens as a \(1, 8\) mesh, not \(1, 2\)"):
        open_device("mock", board="t3k", mesh_shape=(1, 2))


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(sys.argv[1])), flush=True)
