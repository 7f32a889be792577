"""One decode step of SmolLM2-135M at batch 32 on the host backend, split the way a TT device splits it, and the
DRAM-bandwidth bound of a decode step on TT boards.

For each path (eager logits, traced logits, traced with device sampling: greedy, and top-k/top-p with seeds):
the whole ``decode_forward`` call; the ttnn calls it makes from Python and the bytes it moves host -> device and
device -> host (counted on the host backend, whose calls and tensors are ttnn's); the host work a device would
leave on the host: building the step's host inputs (token ids, positions, page table, rotary cos/sin, sampling
parameters) and reading the result back (``[32, V]`` float32 logits or ``[32]`` tokens). On the host backend the
device part is torch compute, so only the counts, the host part and the bytes carry over to silicon.

Then the DRAM bytes a decode step reads (every weight at its stored dtype, and the KV cache of 32 users at context
``--context``) as a bound in tokens/s/user for n150 (288 GB/s), n300 (576 GB/s) and p150 (512 GB/s), for SmolLM2
at its default precision and for Llama 3.1 8B's dims at the performance profile, beside TT's published figures
for Llama 3.1 8B at batch 32 (tt-metal demos, sequence length 128).

Device-side token feedback (:mod:`decode_feedback`): per family, the host time between two decode enqueues with
TT vLLM's async decode feeding the sampled tokens back on the device (``reset_batch=False``) and without it.

Tensor parallelism: the collectives of one decode step of a tiny Llama split over a 1x8 host mesh, counted per layer
(calls, and bytes each chip receives over ethernet: ``(N - 1) / N`` of a gathered or reduced ``[32, dim]``), checked
against the formula, then the bound of a Llama 3.1 70B decode step on a T3K: per chip, its DRAM bytes
(1/8 of the weights, one KV head) at 288 GB/s plus its collective bytes over one ethernet link per direction of a
ring (100 Gb/s each way per Wormhole ethernet core: Tenstorrent's "Wormhole Series Part 1: Physicalities"; TT's
1xN decoders use ``num_links=1`` on T3K), beside TT's published 15.9 t/s/u at batch 32. Hop latency is not modelled.

    .venv/bin/python bench/decode_path.py [--steps 5] [--threads 1] [--context 128]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any, Callable

import torch
from transformers import LlamaConfig
from transformers import LlamaForCausalLM as LlamaForCausalLMReference

import decode_feedback
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.runtime import api_for, close_device, open_device
from tt_models.tt.model_config import Precision
from tt_models.tt.sampling import SamplingBatch

BATCH, BLOCK, WIDTH = 32, 64, 16
BYTES = {"bfloat16": 2.0, "bfloat8_b": 1.0625, "bfloat4_b": 0.5625, "float32": 4.0, "int32": 4.0, "uint32": 4.0,
         "uint16": 2.0, "uint8": 1.0}  # per element as stored on a device (block floats: 16 values share an exponent)
BOARDS = {"n150": 288e9, "n300": 576e9, "p150": 512e9}  # DRAM bytes/s (docs.tenstorrent.com)
ETHERNET_LINK = 100e9 / 8  # bytes/s each way of one Wormhole ethernet core
PUBLISHED_70B_T3K = 15.9  # Llama 3.1 70B, TP=8 on T3K, batch 32, t/s/u (tt-metal models/README.md, Nov 2025)
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
PUBLISHED_8B = {"n150": 26.0, "p150": 33.1}  # Llama 3.1 8B, batch 32, t/s/u (tt-metal models/README.md, Oct 2025)


def _bytes(dtype: Any, numel: int) -> float:
    return numel * BYTES[getattr(dtype, "name", str(dtype)).lower()]


@contextmanager
def counting(api: ModuleType) -> Iterator[dict[str, float]]:
    """Counts the ttnn calls made from Python (the API's functions and its ``experimental`` / ``transformer``
    namespaces) and the bytes they move between host and device."""
    counts = {"calls": 0, "to device": 0.0, "to host": 0.0}

    def counted(name: str, fn: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts["calls"] += 1
            if name == "from_torch" and kwargs.get("device") is not None:
                counts["to device"] += _bytes(kwargs.get("dtype") or "bfloat16", args[0].numel())
            elif name in ("to_device", "copy_host_to_device_tensor"):
                counts["to device"] += _bytes(args[0].dtype, math.prod(args[0].shape))
            elif name in ("to_torch", "from_device"):
                counts["to host"] += _bytes(args[0].dtype, math.prod(args[0].shape))
            return fn(*args, **kwargs)
        return call

    originals = []
    for namespace in (api, api.experimental, api.transformer):
        for name in dir(namespace):
            fn = getattr(namespace, name)
            if not name.startswith("_") and callable(fn) and not isinstance(fn, (type, ModuleType)):
                originals.append((namespace, name, fn))
                setattr(namespace, name, counted(name, fn))
    try:
        yield counts
    finally:
        for namespace, name, fn in originals:
            setattr(namespace, name, fn)


def decode_step(kv: Any, vocab: int) -> dict[str, Any]:
    """The arguments of a decode step of ``BATCH`` users at position 100, each with ``WIDTH`` blocks of its own."""
    return dict(tokens=torch.randint(0, vocab, (BATCH, 1), dtype=torch.int32),
                start_pos=torch.full((BATCH,), 100, dtype=torch.int32),
                page_table=torch.arange(BATCH * WIDTH, dtype=torch.int32).reshape(BATCH, WIDTH), kv_cache=kv)


def decode_bytes(config: Any, precision: Precision, context: int, chips: int = 1) -> float:
    """DRAM bytes one decode step of ``BATCH`` users reads on each of ``chips`` tensor-parallel chips: its share of
    every decoder weight and of the LM head at their stored dtypes, and each user's K and V at ``context`` tokens
    of its KV heads (``kv_heads // min(chips, kv_heads)``)."""
    dim, hidden, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or dim // config.num_attention_heads
    kv_width = config.num_key_value_heads * head_dim
    attention = _bytes(precision.attention_weights, dim * (2 * dim + 2 * kv_width)) / chips
    mlp = _bytes(precision.mlp_weights, 3 * dim * hidden) / chips
    kv_heads = config.num_key_value_heads // min(chips, config.num_key_value_heads)
    kv = _bytes(precision.kv_cache, BATCH * context * 2 * kv_heads * head_dim)
    return layers * (attention + mlp + kv) + _bytes(precision.lm_head_weights, config.vocab_size * dim) / chips


def collective_bytes_per_step(dim: int, layers: int, chips: int) -> float:
    """Bytes each chip receives in one decode step: per layer two all-gathers (before the norms) and two
    reduce-scatters (after the attention output and MLP down projections), then the final norm's all-gather, each of
    a ``[32, dim]`` bfloat16 activation."""
    return (4 * layers + 1) * (chips - 1) / chips * BATCH * dim * 2


def bandwidth_table(models: dict[str, tuple[Any, Precision]], context: int) -> None:
    print(f"\nDRAM-bandwidth bound of a decode step at batch {BATCH}, context {context} (weights + KV read once per "
          "step), t/s/u:")
    print(f"  {'model':44s} {'GB/step':>8s} " + " ".join(f"{board:>7s}" for board in BOARDS) + "   published (TT)")
    for name, (config, precision) in models.items():
        step = decode_bytes(config, precision, context)
        bounds = " ".join(f"{bw / step:7.1f}" for bw in BOARDS.values())
        published = ", ".join(f"{b} {v}" for b, v in PUBLISHED_8B.items()) if "8B" in name else "-"
        print(f"  {name:44s} {step / 1e9:8.3f} {bounds}   {published}")


@contextmanager
def counting_collectives(api: ModuleType) -> Iterator[dict[str, float]]:
    """Counts the collective calls and the bytes each chip receives in them."""
    counts = {"calls": 0, "bytes": 0.0}

    def counted(fn: Callable) -> Callable:
        def call(x: Any, *args: Any, **kwargs: Any) -> Any:
            out = fn(x, *args, **kwargs)
            chips = x.device().get_num_devices()
            whole = max(math.prod(x.shape), math.prod(out.shape))  # gathered output, or reduced input
            counts["calls"] += 1
            counts["bytes"] += (chips - 1) / chips * _bytes(x.dtype, whole)
            return out
        return call

    originals = {name: getattr(api, name) for name in COLLECTIVES}
    for name, fn in originals.items():
        setattr(api, name, counted(fn))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(api, name, fn)


def tensor_parallel_table(context: int) -> None:
    """Collectives of a decode step measured on a 1x8 host mesh, and the 70B-on-T3K bound."""
    chips = 8
    tiny = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                       num_key_value_heads=8, head_dim=32, vocab_size=512)
    device = open_device("host", mesh_shape=(1, chips))
    model = LlamaForCausalLM.from_state_dict(tiny, LlamaForCausalLMReference(tiny).state_dict(), device, BATCH,
                                             max_seq_len=WIDTH * BLOCK)
    replica = model.models[0]
    heads, head_dim = replica.kv_geometry
    kv = model.allocate_kv_cache((BATCH * WIDTH, heads, BLOCK, head_dim), None, replica.n_layers)
    step = decode_step(kv, vocab=500)
    results = {}
    for name, extra in {"logits to host": {}, "greedy on device": {"sampling_params": SimpleNamespace(
            temperature=[0.0] * BATCH, top_k=[1] * BATCH, top_p=[0.0] * BATCH)}}.items():
        with counting_collectives(api_for(device)) as counts:
            model.decode_forward(**step, **extra)
        results[name] = counts
    close_device(device)
    measured = results["logits to host"]["bytes"]
    expected = collective_bytes_per_step(tiny.hidden_size, tiny.num_hidden_layers, chips)
    print(f"\nTensor parallelism: one decode step of a {tiny.num_hidden_layers}-layer Llama (hidden "
          f"{tiny.hidden_size}) on a 1x{chips} host mesh, batch {BATCH}:")
    for name, counts in results.items():
        print(f"  {name:18s} {counts['calls']:3d} collectives ({counts['calls'] / tiny.num_hidden_layers:.1f} per "
              f"layer), {counts['bytes'] / 1e3:7.1f} kB received per chip")
    print(f"  formula: per layer 2 all-gathers + 2 reduce-scatters of [32, dim] bf16, and the final norm's all-gather "
          f"= {expected / 1e3:.1f} kB per chip; device sampling adds one all-gather of the [32, vocab] float32 logits")
    assert results["logits to host"]["calls"] == 4 * tiny.num_hidden_layers + 1 and abs(measured - expected) < 1
    llama_70b = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                            num_key_value_heads=8, vocab_size=128256)
    print(f"\nLlama 3.1 70B dims on a T3K (TP={chips}), batch {BATCH}, context {context}, per chip per decode step:")
    print(f"  {'profile':12s} {'DRAM GB':>8s} {'DRAM ms':>8s} {'CCL MB':>7s} {'CCL ms':>7s} {'bound t/s/u':>12s}"
          f"   published (TT)")
    ccl = collective_bytes_per_step(llama_70b.hidden_size, llama_70b.num_hidden_layers, chips)
    ccl_seconds = ccl / (2 * ETHERNET_LINK)  # a ring: half the bytes arrive from each side, one link each
    for profile in ("performance", "accuracy"):
        dram = decode_bytes(llama_70b, Precision.for_profile(profile), context, chips)
        seconds = dram / BOARDS["n150"] + ccl_seconds
        print(f"  {profile:12s} {dram / 1e9:8.2f} {dram / BOARDS['n150'] * 1e3:8.1f} {ccl / 1e6:7.1f} "
              f"{ccl_seconds * 1e3:7.1f} {1 / seconds:12.1f}   {PUBLISHED_70B_T3K}")


def expert_combine_bytes(dim: int, layers: int, top_k: int, chips: int) -> dict[str, float]:
    """Bytes each chip receives in one decode step (32 users, bfloat16) to combine a mixture of experts split over
    ``chips`` (``tt_models/tt/moe.py``): dense and masked, each chip's partial sums of every token reduce-scattered
    into the fractured residual (the dense MLP's collective), against dispatching each token to the chips of its
    ``top_k`` experts and combining their outputs back (two all-to-alls; with experts spread evenly, a routed copy
    leaves its chip with probability ``(N - 1) / N``)."""
    off_chip = (chips - 1) / chips
    return {"dense masked + reduce-scatter": layers * off_chip * BATCH * dim * 2,
            "dispatch + combine (all-to-all)": layers * 2 * off_chip * BATCH * top_k * dim * 2}


def expert_combine_table() -> None:
    print("\nCombining experts over a T3K, per decode step and chip (Qwen3-30B-A3B: dim 2048, 48 layers, top 8; "
          "GPT-OSS-120B: dim 2880, 36 layers, top 4), MB:")
    for name, (dim, layers, top_k) in {"Qwen3-30B-A3B": (2048, 48, 8), "GPT-OSS-120B": (2880, 36, 4)}.items():
        costs = expert_combine_bytes(dim, layers, top_k, 8)
        print(f"  {name:14s} " + " | ".join(f"{combine} {nbytes / 1e6:6.2f}" for combine, nbytes in costs.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=128, help="tokens of KV each user reads (TT's figures: 128)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = open_device("host")
    checkpoint = load_hf_checkpoint("smollm2-135m-instruct")
    model = LlamaForCausalLM.from_state_dict(checkpoint.config, checkpoint.state_dict, device, BATCH,
                                             max_seq_len=WIDTH * BLOCK)
    replica = model.models[0]
    n_kv_heads, head_dim = replica.kv_geometry
    kv = model.allocate_kv_cache((BATCH * WIDTH, n_kv_heads, BLOCK, head_dim), None, replica.n_layers)
    step = decode_step(kv, vocab=1000)
    greedy = SimpleNamespace(temperature=[0.0] * BATCH, top_k=[1] * BATCH, top_p=[0.0] * BATCH)
    sampled = SimpleNamespace(temperature=[0.8] * BATCH, top_k=[20] * BATCH, top_p=[0.9] * BATCH,
                              seed=list(range(BATCH)))
    paths = {"eager, logits": dict(enable_trace=False), "traced, logits": dict(enable_trace=True),
             "traced, greedy on device": dict(enable_trace=True, sampling_params=greedy),
             "traced, top-k/top-p on device": dict(enable_trace=True, sampling_params=sampled)}
    positions = step["start_pos"]
    for name, extra in paths.items():
        whole = decode_feedback.timed(lambda: model.decode_forward(**step, **extra), args.steps)
        with counting(api_for(device)) as counts:
            model.decode_forward(**step, **extra)
        raw = model.decode_forward(**step, **extra, read_from_device=False)
        read = decode_feedback.timed(lambda: model.process_decode_output_host(raw), args.steps)

        def host_inputs() -> None:
            replica.decode_inputs(step["tokens"].reshape(-1), positions, step["page_table"])
            params = extra.get("sampling_params")
            if params is not None:
                SamplingBatch.of(params, list(range(BATCH)), positions.tolist(), model.vocab_size,
                                 model.sampling_rng).host_inputs(device, model.vocab_size)

        inputs = decode_feedback.timed(host_inputs, args.steps)
        print(f"{name:32s} decode_forward {whole:8.1f} ms | ttnn calls {counts['calls']:5d} | to device "
              f"{counts['to device'] / 1e3:8.1f} kB | to host {counts['to host'] / 1e3:8.1f} kB | host inputs "
              f"{inputs:6.2f} ms | read back {read:6.2f} ms")
    model.release_traces()
    decode_feedback.report(device, max(args.steps, 20))
    close_device(device)
    llama_8b = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                           num_key_value_heads=8, vocab_size=128256)
    bandwidth_table({"SmolLM2-135M (its default precision)": (checkpoint.config,
                                                             Precision.for_model(checkpoint.config, None)),
                     "Llama 3.1 8B dims (performance profile)": (llama_8b, Precision.for_profile("performance")),
                     "Llama 3.1 8B dims (accuracy profile)": (llama_8b, Precision.for_profile("accuracy"))},
                    args.context)
    tensor_parallel_table(args.context)
    expert_combine_table()


if __name__ == "__main__":
    main()
