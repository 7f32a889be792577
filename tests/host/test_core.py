"""Host tensors own their buffers, as device buffers do: no aliasing with the caller's torch tensors."""

import torch

from tt_models.runtime import host as ttnn


def test_in_place_cache_writes_do_not_reach_torch_tensors(host_device):
    cache_torch = torch.zeros(2, 1, 32, 32)
    cache = ttnn.from_torch(cache_torch, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=host_device)
    before = ttnn.to_torch(cache)
    page_table = ttnn.from_torch(torch.tensor([[1]], dtype=torch.int32), device=host_device)
    fill = ttnn.from_torch(torch.ones(1, 1, 32, 32), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=host_device)
    ttnn.experimental.paged_fill_cache(cache, fill, page_table, batch_idx=0)
    assert torch.all(cache_torch == 0) and torch.all(before == 0)
    assert torch.all(ttnn.to_torch(cache)[1] == 1) and torch.all(ttnn.to_torch(cache)[0] == 0)


def test_host_and_device_copies_are_independent(host_device):
    on_host = ttnn.from_torch(torch.zeros(1, 1, 32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    on_device = ttnn.to_device(on_host, host_device)
    ttnn.copy_host_to_device_tensor(ttnn.from_torch(torch.ones(1, 1, 32, 32), dtype=ttnn.bfloat16,
                                                    layout=ttnn.TILE_LAYOUT), on_device)
    assert torch.all(ttnn.to_torch(on_host) == 0) and torch.all(ttnn.to_torch(on_device) == 1)


def test_empty_block_float_tensor():
    t = ttnn.from_torch(torch.zeros(0, 32), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
    assert list(t.shape) == [0, 32] and ttnn.to_torch(t).numel() == 0
