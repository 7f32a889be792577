"""The offline peer of bench/serve_vs_vllm.py, one run per process: ``python bench/serve_vs_vllm_offline.py
'<json>'`` gives ``prompts`` prompts of ``input_len`` random token ids (``seed``) to tt-models' ``LLM`` (``peer``
"tt-models", host backend) or vLLM's (``peer`` "vllm", the TT plugin: run it with the environment of ``vllm serve``),
each generating ``output_len`` tokens greedily with EOS ignored, and prints one ``RESULT <json>`` line: output tokens,
seconds and tokens/s of that ``generate`` alone (a one-prompt warm-up ``generate`` runs first; loading is not timed).
A process of its own: vLLM's platform and plugin state are process-global, and neither peer shares a process with
the other."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MARKER = "RESULT "
SIZING = {"max_num_seqs": 32, "block_size": 64, "max_model_len": 2048}  # as both servers are started
FIRST_ID = 1000  # SmolLM2's special tokens are its first ids: random prompts stay clear of them


def random_prompts(model: str, count: int, length: int, seed: int) -> list[list[int]]:
    vocab_size = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    return np.random.default_rng(seed).integers(FIRST_ID, vocab_size, size=(count, length)).tolist()


def generate_tt_models(model: str, prompts: list[list[int]], output_len: int) -> tuple[float, int]:
    from tt_models.engine.llm import LLM
    from tt_models.engine.sampling import SamplingParams

    def params(tokens: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)

    with LLM(model, backend="host", **SIZING) as llm:
        llm.generate({"prompt_token_ids": prompts[0]}, params(2), use_tqdm=False)
        start = time.perf_counter()
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params(output_len), use_tqdm=False)
        seconds = time.perf_counter() - start
    return seconds, sum(len(o.outputs[0].token_ids) for o in outputs)


def generate_vllm(model: str, prompts: list[list[int]], output_len: int) -> tuple[float, int]:
    from vllm import LLM, SamplingParams

    def params(tokens: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)

    llm = LLM(model=model, **SIZING)
    llm.generate([{"prompt_token_ids": prompts[0]}], params(2), use_tqdm=False)
    start = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params(output_len), use_tqdm=False)
    seconds = time.perf_counter() - start
    llm.llm_engine.engine_core.shutdown()  # its engine-core process ends before this one reports
    return seconds, sum(len(o.outputs[0].token_ids) for o in outputs)


def main(peer: str, model: str, prompts: int, input_len: int, output_len: int, seed: int = 0) -> dict[str, Any]:
    generate = {"tt-models": generate_tt_models, "vllm": generate_vllm}[peer]
    seconds, tokens = generate(model, random_prompts(model, prompts, input_len, seed), output_len)
    return {"output_tokens": tokens, "seconds": seconds, "output_throughput": tokens / seconds}


if __name__ == "__main__":
    print(MARKER + json.dumps(main(**json.loads(sys.argv[1]))), flush=True)
