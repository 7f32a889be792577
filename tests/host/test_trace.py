"""Trace capture and replay on the host backend behave as on a TT device."""

import pytest
import torch

from tt_models.runtime import host as ttnn


def test_replay_recomputes_from_the_captured_inputs(host_device):
    x_host = ttnn.from_torch(torch.full((1, 1, 32, 32), 2.0), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    x = ttnn.to_device(x_host, host_device)
    w = ttnn.from_torch(torch.eye(32) * 3, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=host_device)

    trace_id = ttnn.begin_trace_capture(host_device, cq_id=0)
    y = ttnn.typecast(ttnn.to_layout(x, ttnn.TILE_LAYOUT), ttnn.float32)
    ttnn.end_trace_capture(host_device, trace_id, cq_id=0)
    assert torch.all(ttnn.to_torch(y) == 2.0)

    new_input = ttnn.from_torch(torch.full((1, 1, 32, 32), 5.0), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    ttnn.copy_host_to_device_tensor(new_input, x)
    ttnn.execute_trace(host_device, trace_id, cq_id=0, blocking=True)
    assert torch.all(ttnn.to_torch(y) == 5.0), "the captured output tensor holds the replayed result"
    ttnn.release_trace(host_device, trace_id)
    with pytest.raises(RuntimeError, match="not captured"):
        ttnn.execute_trace(host_device, trace_id)
    del w


def test_transfers_are_rejected_during_capture(host_device):
    x = ttnn.from_torch(torch.ones(1, 1, 32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=host_device)
    trace_id = ttnn.begin_trace_capture(host_device)
    try:
        with pytest.raises(RuntimeError, match="trace capture"):
            ttnn.to_torch(x)
        with pytest.raises(RuntimeError, match="trace capture"):
            ttnn.from_torch(torch.ones(2), device=host_device)
        with pytest.raises(RuntimeError, match="already in progress"):
            ttnn.begin_trace_capture(host_device)
    finally:
        ttnn.end_trace_capture(host_device, trace_id)
        ttnn.release_trace(host_device, trace_id)


def test_every_device_op_is_recorded():
    """Each op that computes on the device replays in a trace (ops imported under their module's name, such as
    ``matmul`` and ``sampling``, included, and the collectives); transfers, trace control and reading a mesh
    tensor's per-chip tensors are not ops a trace holds."""
    from tt_models.runtime.host import trace

    replayed = trace.recorded(lambda: None).__code__
    host_only = {"begin_trace_capture", "end_trace_capture", "execute_trace", "release_trace", "close_device",
                 "close_mesh_device", "open_device", "open_mesh_device", "get_num_devices",
                 "copy_host_to_device_tensor",
                 "create_sharded_memory_config", "num_cores_to_corerangeset", "deallocate", "from_device",
                 "from_torch", "to_device", "to_torch", "full", "ones", "zeros", "get_device_tensors"}
    for namespace in (ttnn, ttnn.experimental, ttnn.transformer):
        for name in getattr(namespace, "__all__", None) or dir(namespace):
            fn = getattr(namespace, name)
            if callable(fn) and not isinstance(fn, type) and not name.startswith("_") and name not in host_only:
                assert fn.__code__ is replayed, f"{name} is not recorded in traces"
