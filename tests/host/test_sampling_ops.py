"""The host backend's token-selection ops follow ttnn's documented semantics (argmax, topk, gather, sampling,
manual_seed), and their calls are recorded in a trace like every device op."""

import pytest
import torch

from tt_models.runtime import host as ttnn


def _tile(t, device, dtype=ttnn.float32):
    return ttnn.from_torch(t, dtype=dtype, layout=ttnn.TILE_LAYOUT, device=device)


def _row(values, device, dtype):
    return ttnn.from_torch(torch.as_tensor(values), dtype=dtype, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)


def test_argmax_and_topk_pick_the_first_maximum(host_device):
    logits = torch.randn(1, 1, 32, 100)
    logits[0, 0, 3, [7, 40]] = 9.0  # a tie: the lower index wins, as torch.argmax
    x = _tile(logits, host_device)
    index = ttnn.argmax(x, dim=3, keepdim=True)
    assert (index.dtype, index.layout, tuple(index.shape)) == (ttnn.uint32, ttnn.ROW_MAJOR_LAYOUT, (1, 1, 32, 1))
    assert torch.equal(ttnn.to_torch(index).long(), logits.argmax(-1, keepdim=True))
    values, indices = ttnn.topk(x, k=32, dim=-1)
    assert indices.dtype == ttnn.uint32  # float32 input: 32-bit indices
    assert torch.equal(ttnn.to_torch(indices)[..., 0].long(), logits.argmax(-1))
    torch.testing.assert_close(ttnn.to_torch(values), logits.topk(32).values)
    _, small = ttnn.topk(_tile(logits, host_device, ttnn.bfloat16), k=8)
    assert small.dtype == ttnn.uint16
    picked = ttnn.gather(x, 3, ttnn.to_layout(index, ttnn.TILE_LAYOUT))
    torch.testing.assert_close(ttnn.to_torch(picked), logits.max(-1, keepdim=True).values)


def _sample(device, values, k, p, temp, seed=None):
    users, width = values.shape
    v = _tile(values[None, None], device, ttnn.bfloat16)
    i = _row(torch.arange(width).repeat(users, 1)[None, None].int() + 1000, device, ttnn.uint32)
    out = ttnn.sampling(v, i, _row(k, device, ttnn.uint32), _row(p, device, ttnn.bfloat16),
                        _row(temp, device, ttnn.bfloat16), seed=seed)
    assert tuple(out.shape) == (1, 1, 1, users)
    return ttnn.to_torch(out).reshape(-1).long() - 1000


def test_sampling_top_k_top_p_and_seeds(host_device):
    values = torch.linspace(4, 0, 32).repeat(32, 1)
    greedy = _sample(host_device, values, [1] * 32, [0.0] * 32, [1.0] * 32, seed=5)
    assert greedy.tolist() == [0] * 32
    # a seed given to the op reseeds every core with it: the same draw for every row
    draws = {int(_sample(host_device, values, [3] * 32, [1.0] * 32, [1.0] * 32, seed=s)[0]) for s in range(12)}
    assert draws == {0, 1, 2}
    top3 = _sample(host_device, values, [3] * 32, [1.0] * 32, [1.0] * 32, seed=5)
    assert torch.equal(_sample(host_device, values, [3] * 32, [1.0] * 32, [1.0] * 32, seed=5), top3)
    # p: the shortest prefix holding p of the mass (softmax of 4, 3.87, ...: the first two hold > 0.15)
    nucleus = _sample(host_device, values, [32] * 32, [0.15] * 32, [1.0] * 32, seed=1)
    assert set(nucleus.tolist()) <= {0, 1}
    # per-core PRNGs: seeded per user, they advance with every draw
    seeds = _row(list(range(32)), host_device, ttnn.uint32)
    users = _row(list(range(32)), host_device, ttnn.uint32)
    ttnn.manual_seed(seeds, user_ids=users)
    first = _sample(host_device, values, [32] * 32, [1.0] * 32, [0.5] * 32)
    second = _sample(host_device, values, [32] * 32, [1.0] * 32, [0.5] * 32)
    ttnn.manual_seed(seeds, user_ids=users)
    assert torch.equal(_sample(host_device, values, [32] * 32, [1.0] * 32, [0.5] * 32), first)
    assert not torch.equal(first, second)


def test_sampling_validates_like_ttnn(host_device):
    with pytest.raises(RuntimeError, match=r"k must be in \(0, 32\]"):
        _sample(host_device, torch.zeros(32, 32), [33] * 32, [1.0] * 32, [1.0] * 32)
    with pytest.raises(RuntimeError, match="power of 2"):
        _sample(host_device, torch.zeros(32, 96), [1] * 32, [1.0] * 32, [1.0] * 32)
