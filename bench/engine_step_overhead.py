"""Host overhead of the engine per decode step at batch 32, with a model that does no work.

The engine (scheduler, persistent input batch and the contract's arguments, sampler, incremental
detokenization with SmolLM2's real tokenizer, stop checks, outputs) drives a stand-in generator whose
``decode_forward`` hands back one of a few precomputed logits tensors (each row's winner varies by step, so
the detokenizer sees changing text). Decode steps are timed apart from prefill, with a breakdown by engine
part. The peers, measured in the same run: the real SmolLM2 host decode step at the same batch (a short run,
``--real-steps``), and one ``argmax`` over ``[batch, vocab]`` float32 logits.

    .venv/bin/python bench/engine_step_overhead.py [--max-tokens 256] [--real-steps 3]
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

    def __init__(self, vocab_size: int, winners: list[int], num_tables: int = 8) -> None:
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
        return self._next()

    def read_decode_output(self, out: torch.Tensor) -> torch.Tensor:
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
    wrap(engine.runner, "execute", "execute")
    wrap(engine.runner.model, "decode_forward", "model")
    wrap(engine, "_process", "process")
    wrap(engine.sampler, "sample", "sample")
    return totals


def run_decode(engine: LLMEngine, prompts: list[str], max_tokens: int) -> tuple[list[float], int, dict[str, float]]:
    """Run all prompts to the end; returns each decode step's seconds, the tokens decode steps generated, and
    the decode steps' time per engine part."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    for i, prompt in enumerate(prompts):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=256, help="generated tokens per request (no-work run)")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--real-steps", type=int, default=3, help="decode steps of the real SmolLM2 (0: skip)")
    parser.add_argument("--optimizations", choices=["accuracy", "performance"], default="performance")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]  # on a shared machine, others' work shows up as overhead here
    checkpoint = load_hf_checkpoint("smollm2-135m-instruct")
    prompts = chat_prompts(checkpoint)
    config = EngineConfig(max_num_seqs=BATCH, max_model_len=args.max_model_len, block_size=64)
    vocab = checkpoint.config.vocab_size
    winners = checkpoint.tokenizer.encode(" the quick brown fox jumps over the lazy dog while seven wizards hum",
                                          add_special_tokens=False)

    engine = LLMEngine(checkpoint, config, backend="host", generator=NoWorkGenerator(vocab, winners))
    steps, tokens, parts = run_decode(engine, prompts, args.max_tokens)
    engine.close()

    logits = torch.randn(BATCH, vocab)
    logits.argmax(dim=-1)  # warm up
    argmax_s = statistics.median(timed_call(lambda: logits.argmax(dim=-1)) for _ in range(200))

    real_step_s = None
    if args.real_steps > 0:  # the real model's decode step, from the same engine code path
        real = LLMEngine(checkpoint, config, backend="host", optimizations=args.optimizations)
        real_steps, _, _ = run_decode(real, prompts, args.real_steps + 1)
        real.close()
        real_step_s = statistics.mean(real_steps)

    us = sorted(s * 1e6 for s in steps)
    mean_s, tenth = statistics.mean(steps), max(1, len(steps) // 10)
    print(f"\nengine decode steps with a no-work model: batch {BATCH}, SmolLM2 tokenizer (vocab {vocab}), "
          f"{args.max_tokens} tokens per request, torch threads {torch.get_num_threads()}")
    print(f"  {len(steps)} decode steps, {tokens} tokens")
    print(f"  µs per step   mean {mean_s * 1e6:8.1f}   p50 {us[len(us) // 2]:8.1f}   "
          f"p99 {us[min(len(us) - 1, int(len(us) * 0.99))]:8.1f}")
    print(f"  µs per token  {sum(steps) / tokens * 1e6:8.1f}")
    # Per-step work that grows with the output length shows up as late steps slower than early ones.
    print(f"  µs per step   first 10% of steps {statistics.mean(steps[:tenth]) * 1e6:8.1f}   "
          f"last 10% {statistics.mean(steps[-tenth:]) * 1e6:8.1f}")
    rest = sum(steps) - parts["schedule"] - parts["execute"] - parts["process"]
    breakdown = [("scheduler.schedule", parts["schedule"]),
                 ("runner.execute (input batch, contract args, logits)", parts["execute"]),
                 ("  of which the model's decode_forward", parts["model"]),
                 ("engine._process (sample, detokenize, stops, outputs)", parts["process"]),
                 ("  of which sampler.sample", parts["sample"]),
                 ("the rest of engine.step", rest)]
    print("  per decode step:")
    for name, seconds in breakdown:
        print(f"    {name:<54} {seconds / len(steps) * 1e6:8.1f} µs  {seconds / sum(steps):6.1%}")
    print("  peers in this run:")
    print(f"    {f'argmax over [{BATCH}, {vocab}] float32':<54} {argmax_s * 1e6:8.1f} µs  "
          f"(a no-work decode step = {mean_s / argmax_s:.1f}x it)")
    if real_step_s is not None:
        print(f"    {f'real SmolLM2 decode step ({args.optimizations}, mean of {args.real_steps})':<54} "
              f"{real_step_s * 1e6:8.0f} µs  (a no-work decode step = {mean_s / real_step_s:.2%} of it)")
    print(f"  load average (1 min) {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
