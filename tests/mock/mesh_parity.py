"""Ops on a 1x2 mesh (an n300) and on its two data-parallel 1x1 submeshes.

``run(ttnn, mesh)`` works on either backend. The mock cluster is a process singleton (the test process
already holds an n150), so ``python -m tests.mock.mesh_parity`` runs it on a mock n300 in a fresh
process and prints the result as one ``RESULT <json>`` line.
"""

from __future__ import annotations

import json

import torch

from tests.mock.cases import B, NH, NKV, describe, describe_all, rand


def run(ttnn, mesh) -> dict:
    return {"num_devices": mesh.get_num_devices(), "submeshes": data_parallel(ttnn, mesh),
            "outputs": describe_all(replicated_decode(ttnn, mesh))}


def data_parallel(ttnn, mesh) -> list[dict]:
    """One 1x1 submesh per chip, a linear on each. The submeshes share the parent's command queue, so
    they are closed before the parent runs anything (tt-metal refuses to close either one otherwise)."""
    submeshes = mesh.create_submeshes(ttnn.MeshShape(1, 1))
    results = []
    for i, sub in enumerate(submeshes):
        x = ttnn.from_torch(rand(1, 1, 32, 256, seed=i), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=sub)
        w = ttnn.from_torch(rand(256, 128), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=sub)
        results.append({"num_devices": sub.get_num_devices(), "linear": describe(ttnn.linear(x, w))})
    for sub in submeshes:
        ttnn.close_mesh_device(sub)
    return results


def replicated_decode(ttnn, mesh) -> tuple:
    """A decode step's cache write and attention on tensors replicated over the mesh."""
    replicate = ttnn.ReplicateTensorToMesh(mesh)

    def put(x, dtype=None, layout=None, memory_config=None):
        return ttnn.from_torch(x, dtype=dtype or ttnn.bfloat16, layout=layout or ttnn.TILE_LAYOUT, device=mesh,
                               memory_config=memory_config, mesh_mapper=replicate)

    def ints(values):
        return put(torch.tensor(values, dtype=torch.int32), ttnn.int32, ttnn.ROW_MAJOR_LAYOUT)

    d, bs, blocks = 64, 32, 4
    y = ttnn.linear(put(rand(1, 1, 32, 256)), put(rand(256, 512, seed=1), ttnn.bfloat8_b), bias=put(rand(1, 512)))
    cores = ttnn.num_cores_to_corerangeset(B, mesh.compute_with_storage_grid_size(), True)
    one_user_per_core = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1,
                                          ttnn.ShardSpec(cores, [32, d], ttnn.ShardOrientation.ROW_MAJOR))
    keys = put(rand(B * blocks, NKV, bs, d), ttnn.bfloat8_b)
    values = put(rand(B * blocks, NKV, bs, d, seed=1), ttnn.bfloat8_b)
    table = ints([[u * blocks + j for j in range(blocks)] for u in range(B)])
    pos = ints([0, 1, 31, -1, 64, 100, 127, 5])
    keys = ttnn.experimental.paged_update_cache(keys, put(rand(1, B, NKV, d), memory_config=one_user_per_core),
                                                update_idxs_tensor=pos, page_table=table)
    attn = ttnn.transformer.paged_scaled_dot_product_attention_decode(
        put(rand(1, B, NH, d)), keys, values, page_table_tensor=table, cur_pos_tensor=pos, scale=d ** -0.5)
    return y, keys, attn, ttnn.to_torch(y, mesh_composer=ttnn.ConcatMeshToTensor(mesh, dim=0))


if __name__ == "__main__":
    from tt_models.runtime import close_device, open_device

    mesh = open_device("mock", board="n300")
    import ttnn

    print("RESULT " + json.dumps(run(ttnn, mesh)), flush=True)
    close_device(mesh)
