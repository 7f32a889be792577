"""Llama 3.2 Vision's generator class driven as TT's V0 runner drove it (host backend): keyword calls; one prefill
with a 3-tile image row and a text-only row, a 1-tile image request joining mid-run; cross blocks from the same
shuffled pool as self blocks (interleaved); stale tails in every table; unused blocks NaN-filled and untouched;
decode padded with ``start_pos = -1`` rows and the masks handed back per row. Teacher-forced along HF's greedy
continuation, every step's logits have PCC >= 0.99 with HF's; free-running greedy output agrees with HF
``generate`` under vLLM's logprobs-closeness rule."""

import pytest
import torch

from tests.closeness import rows_agree
from tests.models.test_mllama_pcc import hf_inputs
from tests.models.vllm_driver import (Request, VllmDriver, assert_unowned_blocks_untouched, fill_nan, greedy_rows,
                                      teacher_forced_pcc)
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.testing.images import random_image
from tt_models.testing.mllama import IMAGE_TOKEN, tiny_mllama

MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 32, 64
NEW_TOKENS = 20
# (image size or None, prompt): the image token after a few text tokens (rows HF fully masks come first)
CASES = [((120, 50), [1, 5, IMAGE_TOKEN, 17, 33, 9]), (None, [1, 44, 12, 90, 3]),
         ((40, 30), [1, IMAGE_TOKEN, 250, 61, 7, 8, 19, 23])]


@pytest.fixture(scope="module")
def mllama_case():
    hf = tiny_mllama()
    return hf, mllama_items(hf)


def mllama_items(hf):
    """Per case: its image (or None), prompt, HF's greedy continuation and HF's logits along it."""
    items = []
    for size, prompt in CASES:
        image = None if size is None else random_image(*size, seed=size[0])
        inputs = {"input_ids": torch.tensor([prompt])} if image is None else hf_inputs(hf, prompt, image)
        with torch.no_grad():
            sequence = hf.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)[0]
            full = {"input_ids": sequence[None]} if image is None else hf_inputs(hf, sequence.tolist(), image)
            logits = hf(**full).logits[0]
        items.append((image, prompt, sequence, logits))
    return items


def _model(hf, device, profile="accuracy"):
    model = MllamaForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                           max_seq_len=MAX_LEN, optimizations=profile)
    args = model.models[0].text.args
    kv = model.allocate_kv_cache((NUM_BLOCKS, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, args.n_layers)
    return model, kv


def _driver(model, kv):
    return VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                      width=MAX_LEN // BLOCK, cross_width=-(-model.max_cross_attn_tokens // BLOCK) + 1, vision=True)


def _requests(model, items):
    return [Request(tokens=list(prompt), prompt_len=len(prompt), image=image,
                    encoder_len=0 if image is None else model.max_cross_attn_tokens)
            for image, prompt, _, _ in items]


@pytest.mark.parametrize("delivery", ["decode", "one-token-prefill"])
def test_teacher_forced_steps_match_hf(host_device, mllama_case, delivery):
    hf, items = mllama_case
    model, kv = _model(hf, host_device)
    fill_nan(kv)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=False, max_batch_size=MAX_BATCH, num_blocks=MAX_LEN // BLOCK)
    driver = _driver(model, kv)
    requests = _requests(model, items)
    scores, ever_owned = teacher_forced_pcc(driver, requests, [item[2] for item in items],
                                            [item[3] for item in items], slots=(1, 3, 0), join_after=6,
                                            new_tokens=NEW_TOKENS, delivery=delivery)
    assert [r.masks[1] for r in requests] == [1.0, 0.0, 1.0]  # the text-only request's rows see no image
    print(f"\nmllama {delivery}: {len(scores)} steps, min PCC {min(scores):.5f}")
    assert min(scores) >= 0.99
    assert_unowned_blocks_untouched(kv, ever_owned, NUM_BLOCKS)


@pytest.mark.numerics
@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_free_running_greedy_agrees_with_hf_generate(host_device, mllama_case, profile):
    hf, items = mllama_case
    model, kv = _model(hf, host_device, profile)
    driver = _driver(model, kv)
    requests = _requests(model, items)
    our_rows = greedy_rows(driver, requests, (2, 0, 3), NEW_TOKENS)
    for i, (r, rows) in enumerate(zip(requests, our_rows)):
        sequence, hf_logits = items[i][2], items[i][3]
        their_rows = hf_logits[r.prompt_len - 1: r.prompt_len - 1 + NEW_TOKENS]
        exact = rows_agree(r.tokens[r.prompt_len:], sequence[r.prompt_len:].tolist(), rows, their_rows)
        print(f"\nmllama {profile} request {i}: {exact}/{NEW_TOKENS} tokens identical to HF generate")


def test_bad_rows_fail_with_a_clear_error(host_device, mllama_case):
    hf, _ = mllama_case
    model, kv = _model(hf, host_device)
    image = random_image(60, 60, seed=1)
    cross = torch.arange(3, dtype=torch.int32)[None]
    call = dict(page_table=torch.tensor([[5, 6]], dtype=torch.int32), kv_cache=kv, cross_page_table=cross)
    with pytest.raises(ValueError, match="2 images"):
        model.prefill_forward(tokens=torch.tensor([[1, IMAGE_TOKEN, 4]]), images=[[image, image]], prompt_lens=[3],
                              **call)
    with pytest.raises(ValueError, match="no image"):
        model.prefill_forward(tokens=torch.tensor([[1, IMAGE_TOKEN, 4]]), images=[None], prompt_lens=[3], **call)
    with pytest.raises(ValueError, match="2 <|image|> tokens"):
        model.prefill_forward(tokens=torch.tensor([[1, IMAGE_TOKEN, IMAGE_TOKEN]]), images=[[image]], prompt_lens=[3],
                              **call)
    with pytest.raises(TypeError, match="PIL"):
        model.prefill_forward(tokens=torch.tensor([[1, IMAGE_TOKEN, 4]]), images=[["not an image"]], prompt_lens=[3],
                              **call)
    with pytest.raises(ValueError, match="cross blocks"):
        model.prefill_forward(tokens=torch.tensor([[1, IMAGE_TOKEN, 4]]), images=[[image]], prompt_lens=[3],
                              **{**call, "cross_page_table": cross[:, :1]})
