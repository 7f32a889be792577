"""Host-backend decode attention step against ttnn's own torch golden functions, in the same run.

One decode step of one attention layer as tt_transformers runs it: ``paged_update_cache`` for K and V
(one token per user, decode layout, height-sharded one user per core), then
``paged_scaled_dot_product_attention_decode`` over the pool. The peer is the real ttnn wheel's golden
function for the SDPA (gather the pages to a contiguous cache, then attend) plus a plain per-user torch
cache write. Prints time per step and the ratio peer / host (> 1: the host backend is faster).

    .venv/bin/python bench/host_paged_decode.py [--batch 32] [--context 1024] [--iters 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tt_models.runtime import host as ttnn


def timed(fn, iters: int) -> float:
    fn()  # warm up
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--context", type=int, default=1024, help="max tokens per user")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    b, nh, nkv, d, bs = args.batch, args.heads, args.kv_heads, args.head_dim, args.block_size
    blocks_per_user = args.context // bs
    num_blocks = b * blocks_per_user
    device = ttnn.open_device(device_id=0)

    page_table_t = torch.randperm(num_blocks, dtype=torch.int32).reshape(b, blocks_per_user)
    cur_pos_t = torch.randint(0, args.context, (b,), dtype=torch.int32)
    k_cache_t = torch.randn(num_blocks, nkv, bs, d)
    v_cache_t = torch.randn(num_blocks, nkv, bs, d)
    q_t = torch.randn(1, b, nh, d)
    k_new_t = torch.randn(1, b, nkv, d)
    v_new_t = torch.randn(1, b, nkv, d)

    def on_device(t, dtype=ttnn.bfloat16, memory_config=None, layout=ttnn.TILE_LAYOUT):
        return ttnn.from_torch(t, dtype=dtype, layout=layout, device=device, memory_config=memory_config)

    grid = device.compute_with_storage_grid_size()
    sharded = ttnn.create_sharded_memory_config(
        (32, d), ttnn.num_cores_to_corerangeset(b, grid, row_wise=True), ttnn.ShardStrategy.HEIGHT,
        ttnn.ShardOrientation.ROW_MAJOR, use_height_and_width_as_shard_shape=True)
    k_cache, v_cache = on_device(k_cache_t, ttnn.bfloat8_b), on_device(v_cache_t, ttnn.bfloat8_b)
    q = on_device(q_t)
    k_new, v_new = on_device(k_new_t, memory_config=sharded), on_device(v_new_t, memory_config=sharded)
    page_table = on_device(page_table_t, ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT)
    cur_pos = on_device(cur_pos_t, ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT)

    def host_step():
        ttnn.experimental.paged_update_cache(k_cache, k_new, update_idxs_tensor=cur_pos, page_table=page_table)
        ttnn.experimental.paged_update_cache(v_cache, v_new, update_idxs_tensor=cur_pos, page_table=page_table)
        return ttnn.transformer.paged_scaled_dot_product_attention_decode(
            q, k_cache, v_cache, page_table_tensor=page_table, cur_pos_tensor=cur_pos)

    import ttnn as real_ttnn

    golden_sdpa = real_ttnn.get_golden_function(real_ttnn.transformer.paged_scaled_dot_product_attention_decode)
    k_peer, v_peer = k_cache_t.clone(), v_cache_t.clone()
    q_peer = q_t.bfloat16().float()

    def peer_step():
        for user in range(b):  # the plain cache write a torch reference does
            pos = int(cur_pos_t[user])
            block = page_table_t[user, pos // bs]
            k_peer[block, :, pos % bs] = k_new_t[0, user]
            v_peer[block, :, pos % bs] = v_new_t[0, user]
        return golden_sdpa(q_peer, k_peer, v_peer, page_table_t, cur_pos_tensor=cur_pos_t)

    host_s, peer_s = timed(host_step, args.iters), timed(peer_step, args.iters)
    print(f"decode step, batch {b}, {nh}/{nkv} heads x {d}, block {bs}, context {args.context}, "
          f"{num_blocks} blocks (bfloat8_b K/V)")
    print(f"  host backend          {host_s * 1e3:8.2f} ms/step")
    print(f"  ttnn golden + writes  {peer_s * 1e3:8.2f} ms/step")
    print(f"  ratio peer/host       {peer_s / host_s:8.2f}x")


if __name__ == "__main__":
    main()
