"""The decoder-only text generator classes (the Llama family, text-only Gemma 3) driven exactly as TT vLLM drives
them (host backend). A class is one line of ``CASES``: its tiny HF model and the class.

Teacher-forced along HF's greedy continuation (32 tokens per request), every prefill and decode step's
logits must have PCC >= 0.99 with HF's at that position. Unused KV blocks start as NaN and must still be
NaN at the end (no stray writes), and NaN read by mistake would show in the logits.
"""

import pytest
import torch
from transformers import AutoConfig

from tests.closeness import rows_agree
from tests.models.vllm_driver import (Request, VllmDriver, assert_unowned_blocks_untouched, fill_nan, greedy_rows,
                                      teacher_forced_pcc)
from tt_models.models.gemma3.generator import Gemma3ForCausalLM
from tt_models.models.llama.generator import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM
from tt_models.testing.gemma3 import tiny_gemma3_text
from tt_models.testing.llama import tiny_model

# name -> (the tiny HF model, the class). Gemma 3's prompts and continuations pass its 32-token sliding window.
CASES = {"llama-gqa": (lambda: tiny_model("llama-gqa"), LlamaForCausalLM),
         "qwen2-bias": (lambda: tiny_model("qwen2-bias"), Qwen2ForCausalLM),
         "qwen3-qk-norm": (lambda: tiny_model("qwen3-qk-norm"), Qwen3ForCausalLM),
         "mistral-window": (lambda: tiny_model("mistral-window"), MistralForCausalLM),
         "qwen3-64-heads": (lambda: tiny_model("qwen3-64-heads"), Qwen3ForCausalLM),
         "gemma3-text": (tiny_gemma3_text, Gemma3ForCausalLM)}
MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 24, 128
NEW_TOKENS = 32
PROMPT_LENS = (20, 37, 9)


@pytest.fixture(scope="module", params=list(CASES))
def model_case(request, tmp_path_factory):
    """(name, HF model, checkpoint dir, prompts, HF greedy sequences, HF logits per sequence)."""
    name = request.param
    hf = CASES[name][0]()
    path = tmp_path_factory.mktemp(name)
    hf.save_pretrained(path)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, hf.config.vocab_size, (n,), generator=g) for n in PROMPT_LENS]
    sequences, logits = [], []
    with torch.no_grad():
        for p in prompts:
            seq = hf.generate(p[None], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0]
            sequences.append(seq)
            logits.append(hf(seq[None]).logits[0])
    return name, hf, path, prompts, sequences, logits


def _generator(name, path, device, optimizations="accuracy"):
    config = AutoConfig.from_pretrained(path)
    model = CASES[name][1].initialize_vllm_model(config, device, MAX_BATCH, max_seq_len=MAX_LEN, tt_data_parallel=1,
                                                optimizations=optimizations)
    args = model.models[0].args
    kv = model.allocate_kv_cache((NUM_BLOCKS, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, args.n_layers)
    return model, kv


@pytest.mark.parametrize("delivery", ["decode", "one-token-prefill"])
def test_teacher_forced_steps_match_hf(host_device, model_case, delivery):
    name, hf, path, prompts, sequences, hf_logits = model_case
    model, kv = _generator(name, path, host_device)
    fill_nan(kv)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=False, max_batch_size=MAX_BATCH,
                              num_blocks=MAX_LEN // BLOCK, can_sample_on_device=False)
    driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                        width=MAX_LEN // BLOCK)
    requests = [Request(tokens=p.tolist(), prompt_len=len(p)) for p in prompts]
    scores, ever_owned = teacher_forced_pcc(driver, requests, sequences, hf_logits, slots=(0, 2, 1), join_after=10,
                                            new_tokens=NEW_TOKENS, delivery=delivery)  # slot 1 free until 2 joins
    print(f"\n{name} {delivery}: {len(scores)} steps, min PCC {min(scores):.5f}")
    assert min(scores) >= 0.99
    assert_unowned_blocks_untouched(kv, ever_owned, NUM_BLOCKS)


@pytest.mark.numerics
@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_free_running_greedy_agrees_with_hf_generate(host_device, model_case, profile):
    name, hf, path, prompts, sequences, hf_logits = model_case
    model, kv = _generator(name, path, host_device, profile)
    driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                        width=MAX_LEN // BLOCK)
    requests = [Request(tokens=p.tolist(), prompt_len=len(p)) for p in prompts[:2]]
    our_rows = greedy_rows(driver, requests, (3, 0), NEW_TOKENS)
    for i, (r, rows) in enumerate(zip(requests, our_rows)):
        ours = r.tokens[r.prompt_len:]
        theirs = sequences[i][r.prompt_len:].tolist()
        their_rows = hf_logits[i][r.prompt_len - 1: -1]
        exact = rows_agree(ours, theirs, rows, their_rows)
        print(f"\n{name} {profile} request {i}: {exact}/{NEW_TOKENS} tokens identical to HF generate")
