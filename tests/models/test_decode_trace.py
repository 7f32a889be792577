"""Traced decode (host backend): each family's captured decode gives logits bit-identical to eager decode (the Llama
family by Mistral, GQA with a sliding window; tests/vllm/test_plugin_host.py serves the tiny Llama, Qwen2 and Mistral
traced through the plugin).

Two runs per family, each on its own model instance (same weights) and its own fresh KV cache, driven as TT vLLM
drives them (``VllmDriver``): requests join and leave, page tables grow across block boundaries and carry stale
tails, positions advance. One run decodes eagerly only, the other traced only (one ``execute_trace`` per replica
and step, captured once), so every K/V the traced run reads was written by its own trace: a replay that dropped
or misplaced cache writes (or read a stale input) gives other logits from its second step on.
"""

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration

from tests.models.vllm_driver import Request, VllmDriver, teacher_forced_steps
from tt_models.models.bart.generator import BartForConditionalGeneration as TTBart
from tt_models.models.llama.generator import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.runtime import use
from tt_models.testing.images import random_image
from tt_models.testing.images import random_image as qwen_image
from tt_models.testing.llama import tiny_model
from tt_models.testing.mllama import IMAGE_TOKEN, tiny_mllama
from tt_models.testing.qwen2_5_vl import processed, prompt, tiny_qwen2_5_vl
from tt_models.testing.seq2seq import CASES as SEQ2SEQ, SIZES, encoder_input, tiny_seq2seq

MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 32, 128
NEW_TOKENS, JOIN_AFTER = 6, 2
LLAMA = {"llama-gqa": LlamaForCausalLM, "qwen2-bias": Qwen2ForCausalLM, "mistral-window": MistralForCausalLM}
# Per family, the tracked inputs a steady step (same batch) finds on the device already: the positions and the
# indices derived from them, which the step advances itself, and a row's per-request inputs.
ROTARY = ("current_pos", "rot_idx")
STEADY = {name: ROTARY for name in (*LLAMA, "qwen2.5-vl", "gemma3")} | \
    {name: ("current_pos", "position_ids", "cross_pos") for name in SEQ2SEQ} | \
    {"mllama": (*ROTARY, "cross_last", "cross_attends", "text_rows")}


def _kv(model):
    n_kv_heads, head_dim = model.models[0].kv_geometry
    return model.allocate_kv_cache((NUM_BLOCKS, n_kv_heads, BLOCK, head_dim), torch.bfloat16, model.models[0].n_layers)


def build(name, device, enable_trace=False):
    """(generator, kv cache, driver, requests), the driver decoding traced with ``enable_trace``; prompts end just
    before a block boundary so that decode grows the page tables mid-run."""
    g = torch.Generator().manual_seed(1)
    if name == "qwen2.5-vl":
        hf = tiny_qwen2_5_vl()
        model = Qwen2_5_VLForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                                   max_seq_len=MAX_LEN)
        kv = _kv(model)
        driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                            width=MAX_LEN // BLOCK, enable_trace=enable_trace, mrope=True)
        pixel_values, grids = processed([qwen_image(112, 56, seed=1), qwen_image(56, 84, seed=2)])
        text = [torch.randint(3, 490, (n,), generator=g).tolist() for n in (9, 11, 7, 15)]
        rows = [(prompt(text[:2], grids[:1]), pixel_values[:1], grids[:1]), (text[2] * 5, None, None),
                (prompt(text[2:], grids[1:]), pixel_values[1:], grids[1:])]  # (one image, text only, one image)
        requests = [Request(tokens=t, prompt_len=len(t), pixel_values=pv, grids=gr) for t, pv, gr in rows]
    elif name in LLAMA:
        hf = tiny_model(name)
        model = LLAMA[name].from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH, max_seq_len=MAX_LEN)
        kv = _kv(model)
        driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                            width=MAX_LEN // BLOCK, enable_trace=enable_trace)
        requests = [Request(tokens=torch.randint(3, hf.config.vocab_size, (n,), generator=g).tolist(), prompt_len=n)
                    for n in (30, 37, 9)]
    elif name in SEQ2SEQ:
        hf = tiny_seq2seq(name)
        model = SEQ2SEQ[name][2].from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH)
        kv = _kv(model)
        requests = []
        for i, (enc_len, dec_len) in enumerate(((45, 30), (100, 5), (17, 3))):
            ours, _, encoder_len = encoder_input(hf, enc_len, seed=10 + i)
            requests.append(Request(tokens=torch.randint(3, 300, (dec_len,), generator=g).tolist(), prompt_len=dec_len,
                                    encoder_input=ours, encoder_len=encoder_len))
        cross_width = -(-max(r.encoder_len for r in requests) // BLOCK)
        driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                            width=64 // BLOCK, cross_width=cross_width, enable_trace=enable_trace)
    else:
        hf = tiny_mllama()
        model = MllamaForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                               max_seq_len=64)
        kv = _kv(model)
        driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                            width=64 // BLOCK, cross_width=-(-model.max_cross_attn_tokens // BLOCK) + 1, vision=True,
                            enable_trace=enable_trace)
        prompts = [((40, 30), [1, IMAGE_TOKEN, 250, 61, 7, 8, 19, 23]), (None, [1, 44, 12, 90, 3]),
                   ((120, 50), [1, 5, IMAGE_TOKEN, 17, 33, 9])]
        requests = [Request(tokens=p, prompt_len=len(p), image=None if size is None else random_image(*size, seed=1),
                            encoder_len=0 if size is None else model.max_cross_attn_tokens) for size, p in prompts]
    return model, kv, driver, requests


def run(name, device, enable_trace):
    """Every prefill's and decode step's logits (request, logits) in order, and the generator and driver."""
    model, kv, driver, requests = build(name, device, enable_trace)
    g = torch.Generator().manual_seed(2)
    sequences = [torch.tensor(r.tokens + torch.randint(3, 200, (NEW_TOKENS,), generator=g).tolist())
                 for r in requests]
    seen = []
    teacher_forced_steps(driver, requests, sequences, slots=(1, 3, 0), join_after=JOIN_AFTER,
                         new_tokens=NEW_TOKENS, delivery="decode", check=lambda i, logits: seen.append((i, logits)))
    return seen, model, driver


@pytest.mark.parametrize("name", ["mistral-window", "whisper-multilingual", "bart", "mbart", "mllama", "qwen2.5-vl"])
def test_traced_only_decode_is_bit_identical_to_eager_only(host_device, name):
    eager, _, _ = run(name, host_device, enable_trace=False)
    traced, model, driver = run(name, host_device, enable_trace=True)
    # Two requests, a third joining at their second step (its prefill in between), the first two leaving after 6
    assert driver.decode_steps == JOIN_AFTER + NEW_TOKENS - 1 and len(traced) == len(eager)
    for step, ((i, expected), (j, got)) in enumerate(zip(eager, traced)):
        assert i == j and torch.equal(got, expected), \
            f"request {i}, logits #{step}: traced differs from eager by {float((got - expected).abs().max())}"
    assert model.traces.executions == driver.decode_steps * len(model.devices), "one execute_trace a step"
    assert len(model.traces.captures) == 1, "one capture for the whole run (same shapes, same mode)"
    # Copied at the first step, when the third request joins and when the first two leave; skipped at every other.
    traces = model.traces
    assert {n: (traces.copies[n], traces.skipped[n]) for n in STEADY[name]} == \
        {n: (3, driver.decode_steps - 3) for n in STEADY[name]}
    model.release_traces()
    assert not model.traces.captures


def test_traced_steps_copy_a_page_table_only_when_it_changed_and_release_through_their_own_api(mock_device,
                                                                                               host_device):
    """Page tables change only when a row crosses a block boundary: a traced step skips copying an unchanged one, and
    a changed one takes effect. Row 0 crosses into its second block at step 2; the column it then gets named row 1's
    block before (a stale tail), so a skipped copy would write row 0's K/V over row 1's and change row 1's logits.
    The runner refills its table in place, as TT vLLM's does.

    Then: a generator's finalizer releases its traces whenever it is collected, with whichever device's API is
    active then: a host generator's must still go to the host backend (the real ttnn refuses a host device)."""
    hf = tiny_model("llama-gqa")
    model = LlamaForCausalLM.from_state_dict(hf.config, hf.state_dict(), host_device, MAX_BATCH, max_seq_len=MAX_LEN)
    tokens = torch.randint(3, hf.config.vocab_size, (3, MAX_BATCH, 1), generator=torch.Generator().manual_seed(3))

    def decode(enable_trace):
        kv, table, logits = _kv(model), torch.zeros(MAX_BATCH, 2, dtype=torch.int32), []
        table[:2] = torch.tensor([[3, 5], [5, 3]])
        for step in range(3):
            if step == 2:
                table[0, 1] = 7  # row 0 at position 32
            logits.append(model.decode_forward(tokens=tokens[step], start_pos=torch.tensor([30 + step, step, -1, -1]),
                                               page_table=table, kv_cache=kv, enable_trace=enable_trace))
        return logits

    eager, traced = decode(enable_trace=False), decode(enable_trace=True)
    assert all(torch.equal(got, expected) for got, expected in zip(traced, eager))
    # Copied into the capture at step 0 and again at step 2 only; the positions, which the step advances on the
    # device, at step 0 only.
    traces = model.traces
    assert [(traces.copies[name], traces.skipped[name]) for name in ("page_table", "current_pos", "rot_idx")] == \
        [(2, 1), (1, 2), (1, 2)]

    assert len(model.traces.captures) == 1
    with use(mock_device):
        model.release_traces()
    assert not model.traces.captures


def test_padding_rows_position_ids_stay_in_the_table(host_device):
    """A seq2seq step advances its learned-position ids on the device in every row, padding rows too (which read the
    first position, offset 2 for BART), and a trace compares only the active rows': a padding row's id must still
    never pass the table, which the host backend's embedding refuses. A request decoded traced up to the decoder's
    last position beside padding rows (their ids at most its own), then more steps than the table has rows with
    padding rows only (a data-parallel replica without users runs so: every step copies the ids anew)."""
    torch.manual_seed(0)
    hf = BartForConditionalGeneration(BartConfig(**SIZES, vocab_size=320, max_position_embeddings=BLOCK)).eval()
    model = TTBart.from_state_dict(hf.config, hf.state_dict(), host_device, MAX_BATCH)
    kv, idle = _kv(model), torch.full((MAX_BATCH,), -1)
    cross = dict(cross_page_table=torch.zeros(MAX_BATCH, 1, dtype=torch.int32),
                 encoder_lens=torch.tensor([5, 0, 0, 0]))
    tokens = torch.randint(3, 320, (MAX_BATCH, 1), generator=torch.Generator().manual_seed(4))
    table = torch.zeros(MAX_BATCH, 1, dtype=torch.int32)
    for position in range(BLOCK):
        model.decode_forward(tokens=tokens, start_pos=torch.tensor([position, -1, -1, -1]), page_table=table,
                             kv_cache=kv, enable_trace=True, **cross)
    for _ in range(BLOCK + 8):
        model.decode_forward(tokens=tokens, start_pos=idle, page_table=table, kv_cache=kv, enable_trace=True,
                             **model.padding_decode_inputs(MAX_BATCH, 1))
    traces = model.traces
    assert (traces.copies["position_ids"], traces.skipped["position_ids"]) == (1 + BLOCK + 8, BLOCK - 1)
