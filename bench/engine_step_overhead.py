"""Host overhead of the engine per decode step at batch 32, with a model that does no work.

The engine (scheduler, persistent input batch and the contract's arguments, sampler, incremental
detokenization with SmolLM2's real tokenizer, stop checks, outputs) drives a stand-in generator whose
``decode_forward`` hands back one of a few precomputed logits tensors (each row's winner varies by step, so
the detokenizer sees changing text). Decode steps are timed apart from prefill, with a breakdown by engine
part, for greedy requests and for a batch of mixed sampling parameters. Then the overlap case: the stand-in
holds its output back until ``--latency-ms`` after ``decode_forward`` (a device computing meanwhile), and the
engine runs with and without ``async_decode``; and a sweep over data-parallel replica counts. The peers,
measured in the same run: the real SmolLM2 host decode step at the same batch (a short run, ``--real-steps``),
and one ``torch.argmax`` over ``[batch, vocab]`` float32 logits.

    .venv/bin/python bench/engine_step_overhead.py [--max-tokens 256] [--real-steps 3] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from tt_models import SamplingParams
from tt_models.checkpoints import Checkpoint, load_hf_checkpoint
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine

BATCH = 32  # one 32-row decode tile: the engine's maximum max_num_seqs


class NoWorkGenerator:
    """The contract's methods with nothing behind them: logits are a few prebuilt tensors taken in turn."""

    def __init__(self, vocab_size: int, winners: list[int], num_tables: int = 8, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s  # a device's decode time: the output is ready this long after decode_forward
        self.ready_at = 0.0
        self.tables = []
        for t in range(num_tables):
            logits = torch.zeros(BATCH, 1, vocab_size)
            logits[torch.arange(BATCH), 0, [winners[(t + row) % len(winners)] for row in range(BATCH)]] = 1.0
            self.tables.append(logits)
        self.calls = 0

    def _next(self) -> torch.Tensor:
        self.calls += 1
        return self.tables[self.calls % len(self.tables)]

    def allocate_kv_cache(self, shape: tuple, dtype: torch.dtype, num_layers: int) -> list:
        return []  # nothing reads it: no swaps happen in this run

    def prefill_forward(self, *, tokens: torch.Tensor, **_: Any) -> torch.Tensor:
        return self._next()[: tokens.shape[0]]

    def decode_forward(self, **_: Any) -> torch.Tensor:
        self.ready_at = time.perf_counter() + self.latency_s
        return self._next()

    def read_decode_output(self, out: torch.Tensor) -> torch.Tensor:
        wait = self.ready_at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        return out

    def process_decode_output_host(self, out: torch.Tensor) -> torch.Tensor:
        return out


def wrap_timers(engine: LLMEngine) -> dict[str, float]:
    """Accumulate the time spent in a few engine parts (instance attributes shadow the methods)."""
    totals: dict[str, float] = defaultdict(float)

    def wrap(obj: Any, method: str, key: str) -> None:
        fn: Callable = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[key] += time.perf_counter() - start

        setattr(obj, method, timed)

    wrap(engine.scheduler, "schedule", "schedule")
    wrap(engine.runner, "launch", "launch")
    wrap(engine.runner, "collect", "collect")
    wrap(engine.runner.model, "decode_forward", "model")
    wrap(engine, "_sample", "sample")
    wrap(engine.sampler, "sample", "sampler")
    wrap(engine, "_commit", "commit")
    return totals


def mixed_params(i: int, max_tokens: int) -> SamplingParams:
    """A quarter each: greedy, seeded top-k/top-p, greedy with 5 logprobs, sampled with penalties."""
    common = dict(max_tokens=max_tokens, ignore_eos=True)
    return [SamplingParams(temperature=0, **common),
            SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=i, **common),
            SamplingParams(temperature=0, logprobs=5, **common),
            SamplingParams(temperature=1.0, repetition_penalty=1.1, presence_penalty=0.5, **common)][i % 4]


def run_decode(engine: LLMEngine, prompts: list[str], max_tokens: int,
               mixed: bool = False) -> tuple[list[float], int, dict[str, float]]:
    """Run all prompts to the end; returns each decode step's seconds, the tokens decode steps generated, and
    the decode steps' time per engine part."""
    for i, prompt in enumerate(prompts):
        params = mixed_params(i, max_tokens) if mixed else SamplingParams(temperature=0, max_tokens=max_tokens,
                                                                          ignore_eos=True)
        engine.add_request(str(i), prompt, params)
    totals = wrap_timers(engine)
    steps: list[float] = []
    parts: dict[str, float] = defaultdict(float)
    tokens = 0
    while engine.has_unfinished_requests():
        decode_steps, generated, before = engine.stats["decode_steps"], engine.stats["generated_tokens"], dict(totals)
        start = time.perf_counter()
        engine.step()
        elapsed = time.perf_counter() - start
        if engine.stats["decode_steps"] == decode_steps:
            continue  # a prefill step
        steps.append(elapsed)
        tokens += engine.stats["generated_tokens"] - generated
        for key, value in totals.items():
            parts[key] += value - before.get(key, 0.0)
    return steps, tokens, parts


def timed_call(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def chat_prompts(checkpoint: Checkpoint) -> list[str]:
    return [checkpoint.tokenizer.apply_chat_template([{"role": "user", "content": f"Tell me about the number {i}."}],
                                                     add_generation_prompt=True, tokenize=False)
            for i in range(BATCH)]


def no_work_engine(checkpoint: Checkpoint, args: argparse.Namespace, winners: list[int], latency_s: float = 0.0,
                   **config: Any) -> LLMEngine:
    config = EngineConfig(max_num_seqs=BATCH, max_model_len=args.max_model_len, block_size=64, **config)
    generator = NoWorkGenerator(checkpoint.config.vocab_size, winners, latency_s=latency_s)
    return LLMEngine(checkpoint, config, backend="host", generator=generator)


def report(title: str, steps: list[float], tokens: int, parts: dict[str, float]) -> float:
    us = sorted(s * 1e6 for s in steps)
    mean_s = statistics.mean(steps)
    print(f"\n{title}: {len(steps)} decode steps, {tokens} tokens")
    print(f"  µs per step   mean {mean_s * 1e6:8.1f}   p50 {us[len(us) // 2]:8.1f}   "
          f"p99 {us[min(len(us) - 1, int(len(us) * 0.99))]:8.1f}   per token {sum(steps) / tokens * 1e6:6.1f}")
    rest = sum(steps) - sum(parts[k] for k in ("schedule", "launch", "collect", "sample", "commit"))
    breakdown = [("scheduler.schedule", parts["schedule"]),
                 ("runner.launch (input batch, contract args, decode_forward)", parts["launch"]),
                 ("runner.collect (read the output, logits rows)", parts["collect"]),
                 ("engine._sample (sampler, tokens into the batch)", parts["sample"]),
                 ("  of which sampler.sample", parts["sampler"]),
                 ("engine._commit (detokenize, stops, outputs)", parts["commit"]),
                 ("the rest of engine.step", rest)]
    for name, seconds in breakdown:
        print(f"    {name:<58} {seconds / len(steps) * 1e6:8.1f} µs  {seconds / sum(steps):6.1%}")
    return statistics.median(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=256, help="generated tokens per request (no-work run)")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--real-steps", type=int, default=3, help="decode steps of the real SmolLM2 (0: skip)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="simulated device decode time (overlap case)")
    parser.add_argument("--optimizations", choices=["accuracy", "performance"], default="performance")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]  # on a shared machine, others' work shows up as overhead here
    checkpoint = load_hf_checkpoint("smollm2-135m-instruct")
    prompts = chat_prompts(checkpoint)
    vocab = checkpoint.config.vocab_size
    winners = checkpoint.tokenizer.encode(" the quick brown fox jumps over the lazy dog while seven wizards hum",
                                          add_special_tokens=False)
    print(f"engine decode steps with a no-work model: batch {BATCH}, SmolLM2 tokenizer (vocab {vocab}), "
          f"{args.max_tokens} tokens per request, torch threads {torch.get_num_threads()}")

    medians = {}
    for name, mixed in (("greedy", False), ("mixed sampling parameters", True)):
        engine = no_work_engine(checkpoint, args, winners)
        medians[name] = report(name, *run_decode(engine, prompts, args.max_tokens, mixed))
        engine.close()

    latency = args.latency_ms / 1e3
    overlap = {}
    for async_decode in (False, True):
        engine = no_work_engine(checkpoint, args, winners, latency_s=latency, async_decode=async_decode)
        steps, _, _ = run_decode(engine, prompts, min(args.max_tokens, 64))
        overlap[async_decode] = statistics.mean(steps)
        engine.close()
    print(f"\noverlap: the model's output ready {args.latency_ms:g} ms after decode_forward (greedy)")
    for async_decode, mean_s in overlap.items():
        print(f"  async_decode={async_decode!s:<5}  mean step {mean_s * 1e3:7.2f} ms  "
              f"(the simulated device time + {(mean_s - latency) * 1e6:7.1f} µs)")

    print("\ndata-parallel replicas (greedy, no-work model, batch 32 shared by the replicas)")
    for replicas in (1, 2, 4):
        engine = no_work_engine(checkpoint, args, winners, data_parallel_size=replicas)
        steps, _, _ = run_decode(engine, prompts, min(args.max_tokens, 64))
        engine.close()
        print(f"  {replicas} replica(s)  median step {statistics.median(steps) * 1e6:8.1f} µs")

    logits = torch.randn(BATCH, vocab)
    logits.argmax(dim=-1)  # warm up
    argmax_s = statistics.median(timed_call(lambda: logits.argmax(dim=-1)) for _ in range(200))
    print("\npeers in this run:")
    print(f"  {f'torch.argmax over [{BATCH}, {vocab}] float32':<54} {argmax_s * 1e6:8.1f} µs  "
          f"(a greedy no-work decode step = {medians['greedy'] / argmax_s:.2f}x it)")
    if args.real_steps > 0:  # the real model's decode step, from the same engine code path
        config = EngineConfig(max_num_seqs=BATCH, max_model_len=args.max_model_len, block_size=64)
        real = LLMEngine(checkpoint, config, backend="host", optimizations=args.optimizations)
        real_steps, _, _ = run_decode(real, prompts, args.real_steps + 1)
        real.close()
        real_step_s = statistics.mean(real_steps)
        print(f"  {f'real SmolLM2 decode step ({args.optimizations}, mean of {args.real_steps})':<54} "
              f"{real_step_s * 1e6:8.0f} µs  (a greedy no-work decode step = {medians['greedy'] / real_step_s:.2%} "
              "of it)")
    print(f"  load average (1 min) {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
