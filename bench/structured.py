"""The cost of structured outputs: grammar compile times and the per-step cost of token masks, beside unconstrained
decoding.

Compile: with SmolLM2's tokenizer (vocab 49152), the first constrained request's vocabulary read (xgrammar's
``TokenizerInfo`` and compiler), a JSON schema compiled cold, and the same schema again (xgrammar's cache).
Masks: the engine (``bench/engine_step_overhead.py``'s model that does no work, batch 32, greedy, cumulative outputs
as the server streams) decoding 32 requests all unconstrained, then 32 of which 16 are constrained to a JSON schema
(nested object, enum array, bounded string; the arrays are long enough that no constrained row completes within the
run, so every decode step masks 16 rows). The engine thread's CPU time per decode step is compared, with the
sampling part (where the masks are filled and applied) apart; and the masking alone, timed outside the engine: 16
matchers filling a ``[32, vocab]`` bitmask, applying it to float32 logits and accepting each row's token.
With ``sample_on_device`` the same two engine runs again: unconstrained, every decode step samples on the device
(the stand-in hands back its tokens); with constrained rows in the batch, every step falls back to the host for all
32 rows (the engine samples on the device only steps whose rows are all plain greedy), so the figure is the host's
masking and sampling of ``[32, vocab]`` logits beside the device's tokens. (A device's logits read-back, which the
fallback also costs, is not in it: the stand-in's logits are on the host already.)

    .venv/bin/python bench/structured.py [--max-tokens 48] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the no-work engine of engine_step_overhead.py
from engine_step_overhead import BATCH, chat_prompts, no_work_engine, report, run_decode  # noqa: E402

from tt_models import SamplingParams  # noqa: E402
from tt_models.checkpoints import load_hf_checkpoint  # noqa: E402
from tt_models.engine.structured_output import (GrammarCompiler, Guide, StructuredOutputsParams,  # noqa: E402
                                                apply_guides)

CONSTRAINED = 16
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["owner", "pets"],
          "properties": {"owner": {"type": "object", "required": ["name", "age"], "additionalProperties": False,
                                   "properties": {"name": {"type": "string", "maxLength": 8},
                                                  "age": {"type": "integer", "minimum": 0, "maximum": 120}}},
                         "pets": {"type": "array", "minItems": 64, "maxItems": 64,
                                  "items": {"enum": ["cat", "dog", "parrot"]}}}}
CONSTRAINT = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)


def compile_times(compiler: GrammarCompiler) -> None:
    start = time.perf_counter()
    compiler.submit(StructuredOutputsParams(json_object=True)).result()  # vocabulary read + a trivial grammar
    first = time.perf_counter() - start
    start = time.perf_counter()
    compiler.submit(CONSTRAINT).result()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    compiler.submit(CONSTRAINT).result()
    cached = time.perf_counter() - start
    print("grammar compile (wall, xgrammar on 1 thread):")
    print(f"  first constrained request (vocabulary read, {{\"type\": \"object\"}})  {first * 1e3:9.1f} ms")
    print(f"  the bench's JSON schema, cold                                {cold * 1e3:9.1f} ms")
    print(f"  the same schema again (cache)                                {cached * 1e3:9.3f} ms")


def masks_alone(compiler: GrammarCompiler, vocab: int, steps: int) -> float:
    """Median seconds per step of 16 matchers' masks over a [32, vocab] batch and their tokens accepted; a matcher
    that completes starts over (so that 16 rows are masked at every step)."""
    grammar = compiler.submit(CONSTRAINT)
    guides: list[Guide | None] = [Guide(grammar) if i % 2 == 0 else None for i in range(BATCH)]
    background = torch.randn(BATCH, vocab, generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(steps):
        logits = background.clone()  # (the copy is outside the timed part)
        start = time.perf_counter()
        apply_guides(logits, guides)
        tokens = logits.argmax(dim=-1).tolist()
        for i, guide in enumerate(guides):
            if guide is not None:
                guide.accept(tokens[i])
        times.append(time.perf_counter() - start)
        guides = [Guide(grammar) if g is not None and g.terminated else g for g in guides]
    return statistics.median(times)


def run(checkpoint, args: argparse.Namespace, winners: list[int], constrained: int, on_device: bool = False) -> float:
    """The engine's median CPU per decode step for 32 requests, ``constrained`` of them with the schema."""
    engine = no_work_engine(checkpoint, args, winners, sample_on_device=on_device)
    for i, prompt in enumerate(chat_prompts(checkpoint)):
        engine.add_request(str(i), prompt, SamplingParams(
            temperature=0, max_tokens=args.max_tokens, ignore_eos=True,
            structured_outputs=CONSTRAINT if i % 2 == 0 and i < 2 * constrained else None))
    time.sleep(1.0)  # the grammars compile on the engine's worker: all prefills then come before the decode steps
    title = (f"{constrained} of {BATCH} rows constrained to the JSON schema" if constrained
             else f"{BATCH} unconstrained rows") + (", sample_on_device" if on_device else "")
    median = report(title, run_decode(engine, [], args.max_tokens))  # (the requests are queued already)
    engine.close()
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per request (engine runs)")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=200, help="steps of the masks-alone loop")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]
    checkpoint = load_hf_checkpoint("smollm2-135m-instruct")
    vocab = checkpoint.config.vocab_size
    winners = checkpoint.tokenizer.encode(" the quick brown fox jumps over the lazy dog while seven wizards hum",
                                          add_special_tokens=False)
    compiler = GrammarCompiler(checkpoint.tokenizer, vocab, [checkpoint.tokenizer.eos_token_id])
    compile_times(compiler)
    alone = masks_alone(compiler, vocab, args.steps)
    compiler.close()
    print(f"\nmasks alone: {CONSTRAINED} of {BATCH} rows, vocab {vocab}: fill + apply + accept "
          f"{alone * 1e6:8.1f} µs per step (median of {args.steps})")
    plain = run(checkpoint, args, winners, 0)
    masked = run(checkpoint, args, winners, CONSTRAINED)
    print(f"\nper decode step, host work (median): unconstrained {plain * 1e6:8.1f} µs, {CONSTRAINED} rows "
          f"constrained {masked * 1e6:8.1f} µs: the masks add {(masked - plain) * 1e6:8.1f} µs "
          f"({masked / plain:.2f}x)")
    on_device = run(checkpoint, args, winners, 0, on_device=True)
    fallback = run(checkpoint, args, winners, CONSTRAINED, on_device=True)
    print(f"sample_on_device, host work per decode step (median): unconstrained (tokens from the device) "
          f"{on_device * 1e6:8.1f} µs, {CONSTRAINED} rows constrained (the step on the host) "
          f"{fallback * 1e6:8.1f} µs: {(fallback - on_device) * 1e6:8.1f} µs more ({fallback / on_device:.2f}x)")
    print(f"load average (1 min) {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
