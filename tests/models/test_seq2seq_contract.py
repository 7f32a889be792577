"""Whisper and BART generator classes driven as TT vLLM drives them, with paged cross-attention (host backend).

Cross blocks come from the same shuffled pool as self blocks (interleaved), every table has stale tails,
BART rows have different encoder lengths, unused blocks start as NaN and must stay NaN. Teacher-forced along
HF's greedy continuation, every step's logits have PCC >= 0.99 with HF's; free-running greedy output agrees
with HF ``generate`` (Whisper with its suppress-token rules) under vLLM's logprobs-closeness rule.
"""

import pytest
import torch
from transformers import GenerationMixin

from tests.closeness import rows_agree
from tests.models.vllm_driver import (Request, VllmDriver, assert_unowned_blocks_untouched, fill_nan,
                                      teacher_forced_pcc)
from tt_models.testing.seq2seq import CASES, encoder_input, tiny_seq2seq

MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 32, 64
NEW_TOKENS = 24
ENCODER_LENS = (45, 100, 17)  # BART; Whisper always uses its whole window
DECODER_PROMPTS = (2, 5, 3)
SUPPRESS, BEGIN_SUPPRESS = [7, 11, 220], [50256, 13]


@pytest.fixture(scope="module", params=["whisper-multilingual", "bart"])
def seq2seq_case(request):
    name = request.param
    hf = tiny_seq2seq(name)
    hf.generation_config.forced_eos_token_id = None  # BART's default would force EOS at the length limit
    if name.startswith("whisper"):
        hf.generation_config.suppress_tokens = SUPPRESS
        hf.generation_config.begin_suppress_tokens = BEGIN_SUPPRESS
    g = torch.Generator().manual_seed(5)
    items = []
    for i, (enc_len, dec_len) in enumerate(zip(ENCODER_LENS, DECODER_PROMPTS)):
        ours, hf_inputs, encoder_len = encoder_input(hf, enc_len, seed=10 + i)
        # decoder prompts start with the decoder start token, as the engine builds them (<DEC> ...)
        prompt = torch.randint(3, 300, (dec_len,), generator=g)
        prompt[0] = hf.config.decoder_start_token_id
        with torch.no_grad():
            # GenerationMixin.generate: plain greedy with the generation config's suppress-token processors
            # (Whisper's own generate would add its timestamp and language logic on top).
            sequence = GenerationMixin.generate(
                hf, **hf_inputs, decoder_input_ids=prompt[None], max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)[0]
            logits = hf(**hf_inputs, decoder_input_ids=sequence[None]).logits[0]
        items.append((ours, encoder_len, prompt, sequence, logits))
    return name, hf, items


def _model(name, hf, device, profile="accuracy"):
    model = CASES[name][2].from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH, optimizations=profile)
    replica = model.models[0]
    kv = model.allocate_kv_cache((NUM_BLOCKS, hf.config.decoder_attention_heads, BLOCK, replica.args.head_dim),
                                 torch.bfloat16, replica.n_layers)
    return model, kv


def _driver(model, kv):
    return VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                      width=MAX_LEN // BLOCK, cross_width=-(-max(ENCODER_LENS + (64,)) // BLOCK))


def _requests(items):
    return [Request(tokens=prompt.tolist(), prompt_len=len(prompt), encoder_input=ours, encoder_len=encoder_len)
            for ours, encoder_len, prompt, _, _ in items]


@pytest.mark.parametrize("delivery", ["decode", "one-token-prefill"])
def test_teacher_forced_steps_match_hf(host_device, seq2seq_case, delivery):
    name, hf, items = seq2seq_case
    model, kv = _model(name, hf, host_device)
    fill_nan(kv)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=False, max_batch_size=MAX_BATCH, num_blocks=MAX_LEN // BLOCK)
    driver = _driver(model, kv)
    requests = _requests(items)
    scores, ever_owned = teacher_forced_pcc(driver, requests, [item[3] for item in items],
                                            [item[4] for item in items], slots=(1, 3, 0), join_after=6,
                                            new_tokens=NEW_TOKENS, delivery=delivery)
    print(f"\n{name} {delivery}: {len(scores)} steps, min PCC {min(scores):.5f}")
    assert min(scores) >= 0.99
    assert_unowned_blocks_untouched(kv, ever_owned, NUM_BLOCKS)


def _suppress(logits, step, suppress):
    logits = logits.clone()
    if suppress:
        logits[SUPPRESS] = float("-inf")
        if step == 0:
            logits[BEGIN_SUPPRESS] = float("-inf")
    return logits


@pytest.mark.numerics
@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_free_running_greedy_agrees_with_hf_generate(host_device, seq2seq_case, profile):
    name, hf, items = seq2seq_case
    suppress = name.startswith("whisper")
    model, kv = _model(name, hf, host_device, profile)
    driver = _driver(model, kv)
    requests = _requests(items)
    for slot, r in zip((2, 0, 3), requests):
        driver.add(r, slot)
    our_rows = [[_suppress(row, 0, suppress)] for row in driver.prefill(requests)]
    for r, rows in zip(requests, our_rows):
        r.tokens.append(int(rows[-1].argmax()))
    for step in range(1, NEW_TOKENS):
        logits = driver.decode()
        for r, rows in zip(requests, our_rows):
            rows.append(_suppress(logits[r.slot], step, suppress))
            r.tokens.append(int(rows[-1].argmax()))
    for i, (r, rows) in enumerate(zip(requests, our_rows)):
        sequence, hf_logits = items[i][3], items[i][4]
        their_rows = [_suppress(hf_logits[r.prompt_len - 1 + k], k, suppress) for k in range(NEW_TOKENS)]
        exact = rows_agree(r.tokens[r.prompt_len:], sequence[r.prompt_len:].tolist(), rows, their_rows)
        print(f"\n{name} {profile} request {i}: {exact}/{NEW_TOKENS} tokens identical to HF generate")
