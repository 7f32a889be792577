"""Engine throughput against HF ``generate`` in the same run: same weights, same requests, batched, greedy.

Whisper tiny.en transcribes the bundled speech sample (the whole 30 s clip and its segments, cycled up to
``--num-requests``); SmolLM2-135M-Instruct answers chat-templated questions. Each side generates exactly
``--max-tokens`` tokens per request with EOS not stopping it (the engine's ``ignore_eos``; HF with no EOS
token), so the token counts are equal. Only generation is timed (input processing included on both sides,
model loading on neither). Prints tokens/s of each and the ratio engine / HF (> 1: the engine is faster), how many
requests came out token-identical, and the engine's seconds in ``torch.matmul`` (on the host backend, its matmul and
linear ops apart from the rest).

    .venv/bin/python bench/engine_throughput.py [--models whisper smollm2] [--num-requests 16] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig, WhisperForConditionalGeneration

from tt_models import LLM, SamplingParams
from tt_models.audio import speech_sample
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.runtime import default_backend

CHECKPOINTS = {"whisper": "whisper-tiny.en", "smollm2": "smollm2-135m-instruct"}
QUESTIONS = [
    "What is the capital of France?", "Name three colors of the rainbow.", "What is 2 + 3?",
    "Why is the sky blue?", "Write a haiku about the sea.", "How do plants make food?",
    "What is a prime number?", "Give me a tip for learning to cook.", "Who wrote Romeo and Juliet?",
    "Explain gravity to a child.", "What does a CPU do?", "How many legs does a spider have?",
    "Suggest a name for a pet goldfish.", "What is the boiling point of water?", "Why do cats purr?",
    "Describe a sunset in one sentence.",
]

Result = tuple[float, list[list[int]]]  # seconds, generated token ids per request
EngineResult = tuple[float, float, list[list[int]]]  # seconds, of them in torch.matmul, token ids per request


def timed(fn: Callable[[], list[list[int]]]) -> Result:
    start = time.perf_counter()
    tokens = fn()
    return time.perf_counter() - start, tokens


@contextlib.contextmanager
def matmul_time() -> Iterator[list[float]]:
    """Seconds spent in ``torch.matmul`` meanwhile, in a one-element list: on the host backend, its matmul and linear
    ops (the work a TT device would do, in its tile shapes) apart from the other host ops."""
    spent, matmul = [0.0], torch.matmul

    def timed(*args: Any, **kwargs: Any) -> torch.Tensor:
        start = time.perf_counter()
        try:
            return matmul(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    torch.matmul = timed
    try:
        yield spent
    finally:
        torch.matmul = matmul


def run_engine(llm: LLM, prompts: list, max_tokens: int) -> tuple[Result, list[list[int]]]:
    """The engine's result (its seconds, then its seconds in ``torch.matmul``, its tokens) and the decoder prompt
    token ids it ran."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    with matmul_time() as matmul_s:
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
    return ((seconds, matmul_s[0], [list(o.outputs[0].token_ids) for o in outputs]),
            [list(o.prompt_token_ids) for o in outputs])


def greedy_exactly(generation_config: GenerationConfig, max_tokens: int, **fields) -> GenerationConfig:
    """A greedy copy with no EOS token: HF then stops only after ``max_tokens``, as the engine with ``ignore_eos``."""
    config = copy.deepcopy(generation_config)
    config.update(eos_token_id=None, do_sample=False, max_new_tokens=max_tokens, **fields)
    return config


def bench_whisper(num_requests: int, max_tokens: int, llm_kwargs: dict) -> tuple[EngineResult, Result]:
    audio, rate, segments = speech_sample()
    clips = [audio] + [audio[int(s.start * rate): int(s.end * rate)] for s in segments]
    clips = list(itertools.islice(itertools.cycle(clips), num_requests))
    prompts = [{"prompt": "", "multi_modal_data": {"audio": (clip, rate)}} for clip in clips]
    with LLM(CHECKPOINTS["whisper"], **llm_kwargs) as llm:
        engine, _ = run_engine(llm, prompts, max_tokens)

    checkpoint = load_hf_checkpoint(CHECKPOINTS["whisper"])
    hf = WhisperForConditionalGeneration(checkpoint.config).eval()
    hf.load_state_dict(checkpoint.state_dict, strict=True)
    # generate() fills unset fields from the model's own generation config: clear EOS in both.
    hf.generation_config = generation_config = greedy_exactly(checkpoint.generation_config, max_tokens)

    def generate() -> list[list[int]]:
        features = checkpoint.processor.feature_extractor(clips, sampling_rate=rate, return_tensors="pt")
        with torch.inference_mode():  # Whisper's generate returns the generated tokens alone, no decoder prompt
            out = hf.generate(features.input_features, generation_config=generation_config)
        return out.tolist()

    return engine, timed(generate)


def bench_smollm2(num_requests: int, max_tokens: int, llm_kwargs: dict) -> tuple[EngineResult, Result]:
    questions = list(itertools.islice(itertools.cycle(QUESTIONS), num_requests))
    with LLM(CHECKPOINTS["smollm2"], max_model_len=512, **llm_kwargs) as llm:
        tokenizer = llm.get_tokenizer()
        prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                 tokenize=False) for q in questions]
        engine, engine_prompt_ids = run_engine(llm, prompts, max_tokens)

    checkpoint = load_hf_checkpoint(CHECKPOINTS["smollm2"])
    hf = AutoModelForCausalLM.from_config(checkpoint.config).eval()
    hf.load_state_dict(checkpoint.state_dict, strict=True)
    tokenizer = checkpoint.tokenizer
    if tokenizer(prompts, add_special_tokens=True).input_ids != engine_prompt_ids:
        raise RuntimeError("HF's prompt token ids differ from the engine's: the requests would not be the same")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    hf.generation_config = generation_config = greedy_exactly(hf.generation_config, max_tokens, pad_token_id=pad)

    def generate() -> list[list[int]]:
        # Tokenized as the engine tokenizes a text prompt (with special tokens), left-padded for a batch.
        batch = tokenizer(prompts, add_special_tokens=True, padding=True, padding_side="left", return_tensors="pt")
        with torch.inference_mode():
            out = hf.generate(**batch, generation_config=generation_config)
        return out[:, batch.input_ids.shape[1]:].tolist()

    return engine, timed(generate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(CHECKPOINTS), default=["whisper", "smollm2"])
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32, help="generated tokens per request")
    parser.add_argument("--optimizations", choices=["accuracy", "performance"], default="performance")
    parser.add_argument("--max-num-seqs", type=int, default=None, help="engine batch (default: all requests, <= 32)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # generate()'s deprecation notes would bury the table
    llm_kwargs = dict(max_num_seqs=args.max_num_seqs or min(args.num_requests, 32),
                      optimizations=args.optimizations)
    benches = {"whisper": bench_whisper, "smollm2": bench_smollm2}
    load_start = os.getloadavg()[0]  # the machine may be shared: both sides feel the same load only roughly
    rows = []
    for name in args.models:
        (engine_s, matmul_s, engine_tokens), (hf_s, hf_tokens) = benches[name](args.num_requests, args.max_tokens,
                                                                              llm_kwargs)
        n_engine, n_hf = sum(map(len, engine_tokens)), sum(map(len, hf_tokens))
        same = sum(a == b for a, b in zip(engine_tokens, hf_tokens))
        rows.append((CHECKPOINTS[name], len(engine_tokens), n_engine, engine_s, matmul_s, n_hf, hf_s, same))

    print(f"\nengine ({default_backend()} backend, {args.optimizations}, max_num_seqs {llm_kwargs['max_num_seqs']}) "
          f"vs HF generate, greedy, {args.max_tokens} tokens per request, torch threads {torch.get_num_threads()}")
    print(f"{'model':<22} {'reqs':>4} {'tokens':>11} {'engine s':>9} {'of it matmul':>12} {'engine t/s':>10} "
          f"{'HF s':>7} {'HF t/s':>7} {'engine/HF':>9} {'same as HF':>10}")
    for model, reqs, n_engine, engine_s, matmul_s, n_hf, hf_s, same in rows:
        tokens = str(n_engine) if n_engine == n_hf else f"{n_engine}/{n_hf}"  # engine/HF if they differ
        print(f"{model:<22} {reqs:>4} {tokens:>11} {engine_s:>9.2f} {matmul_s:>12.2f} {n_engine / engine_s:>10.2f} "
              f"{hf_s:>7.2f} {n_hf / hf_s:>7.2f} {(n_engine / engine_s) / (n_hf / hf_s):>8.3f}x {same:>6}/{reqs}")
    print("of it matmul: the engine's seconds in torch.matmul (the host backend's matmul and linear ops, in TT's tile "
          "shapes); more than HF s leaves no room for 1.0x whatever the other host ops cost")
    print(f"load average (1 min) {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
