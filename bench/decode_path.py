"""One decode step of SmolLM2-135M at batch 32 on the host backend, split the way a TT device splits it.

For each path (eager logits, traced logits, traced with device sampling: greedy, and top-k/top-p with seeds):
the whole ``decode_forward`` call, and the host work a device would leave on the host: building the step's
host inputs (token ids, positions, page table, rotary cos/sin, sampling parameters) and reading the result
back (``[32, V]`` float32 logits or ``[32]`` tokens). On the host backend the device part is torch compute, so
only the host part and the size of what is read back carry over to silicon.

    .venv/bin/python bench/decode_path.py [--steps 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace
from typing import Any, Callable

import torch

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.runtime import close_device, open_device
from tt_models.tt.sampling import SamplingBatch

BATCH, BLOCK, WIDTH = 32, 64, 16


def timed(fn: Callable[[], Any], steps: int) -> float:
    """Median milliseconds of ``fn`` over ``steps`` calls (after one call that may compile or capture)."""
    fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = open_device("host")
    checkpoint = load_hf_checkpoint("smollm2-135m-instruct")
    model = LlamaForCausalLM.from_state_dict(checkpoint.config, checkpoint.state_dict, device, BATCH,
                                             max_seq_len=WIDTH * BLOCK)
    replica = model.models[0]
    n_kv_heads, head_dim = replica.kv_geometry
    kv = model.allocate_kv_cache((BATCH * WIDTH, n_kv_heads, BLOCK, head_dim), None, replica.n_layers)
    step = dict(tokens=torch.randint(0, 1000, (BATCH, 1), dtype=torch.int32),
                start_pos=torch.full((BATCH,), 100, dtype=torch.int32),
                page_table=torch.arange(BATCH * WIDTH, dtype=torch.int32).reshape(BATCH, WIDTH), kv_cache=kv)
    greedy = SimpleNamespace(temperature=[0.0] * BATCH, top_k=[1] * BATCH, top_p=[0.0] * BATCH)
    sampled = SimpleNamespace(temperature=[0.8] * BATCH, top_k=[20] * BATCH, top_p=[0.9] * BATCH,
                              seed=list(range(BATCH)))
    paths = {"eager, logits": dict(enable_trace=False), "traced, logits": dict(enable_trace=True),
             "traced, greedy on device": dict(enable_trace=True, sampling_params=greedy),
             "traced, top-k/top-p on device": dict(enable_trace=True, sampling_params=sampled)}
    positions = step["start_pos"]
    for name, extra in paths.items():
        whole = timed(lambda: model.decode_forward(**step, **extra), args.steps)
        raw = model.decode_forward(**step, **extra, read_from_device=False)
        read = timed(lambda: model.process_decode_output_host(raw), args.steps)

        def host_inputs() -> None:
            replica.decode_inputs(step["tokens"].reshape(-1), positions, step["page_table"])
            params = extra.get("sampling_params")
            if params is not None:
                SamplingBatch.of(params, list(range(BATCH)), positions.tolist(), model.vocab_size,
                                 model.sampling_rng).host_inputs(device, model.vocab_size)

        inputs = timed(host_inputs, args.steps)
        print(f"{name:32s} decode_forward {whole:8.1f} ms | host inputs {inputs:6.2f} ms | read back {read:6.2f} ms")
    model.release_traces()
    close_device(device)


if __name__ == "__main__":
    main()
