"""Device-side token feedback (TT vLLM's async decode, host backend): with device sampling and ``reset_batch=False``
the driver sends each row a step behind (its previous token and position), as the plugin's steady async decode
does; the model must take the tokens it sampled on the device and advance the positions itself. Every family
generates the same (seeded, sampled) tokens as with the host's rows reloaded at every step, while requests join (a
prefill in between), leave and move to a lower slot (``slot_remap``; ``reset_batch=True`` after each), page tables
grow across block boundaries, traced and (Llama) eager. A model that used the host's rows would repeat each token
("token doubling").
"""

from types import SimpleNamespace

import pytest
import torch

from tests.models.test_decode_trace import BLOCK, MAX_BATCH, MAX_LEN, NUM_BLOCKS, STEADY, _kv, build
from tests.models.vllm_driver import Request, VllmDriver
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.gemma3.text import rope_config
from tt_models.runtime import ttnn, use
from tt_models.testing.gemma3 import processed, prompt, tiny_gemma3
from tt_models.testing.images import random_image
from tt_models.testing.llama import tiny_model
from tt_models.testing.mllama import tiny_mllama
from tt_models.tt.decode_inputs import to_device
from tt_models.tt.model_config import DecoderArgs
from tt_models.tt.rope import RotarySetup, RotaryTable, rotary_index

NEW_TOKENS, JOIN_AFTER = (3, 7, 6), 2  # per request; request 0 leaves first, and request 1 moves to its slot
# Seeded top-k sampling (a row's draw depends on its seed and position): tiny models' greedy runs repeat one token,
# which would hide a repeated one.
SEEDED = SimpleNamespace(temperature=[1.0] * MAX_BATCH, top_k=[32] * MAX_BATCH, top_p=[1.0] * MAX_BATCH,
                         seed=list(range(1, MAX_BATCH + 1)))


def build_gemma3(name, device, enable_trace):
    hf = tiny_gemma3()
    model = Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                           max_seq_len=MAX_LEN)
    kv = _kv(model)
    driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                        width=MAX_LEN // BLOCK, enable_trace=enable_trace, pixel_values=True)
    g = torch.Generator().manual_seed(1)
    text = [torch.randint(3, 200, (n,), generator=g).tolist() for n in (5, 9, 12, 4)]
    rows = [(prompt(text[:2], 1), processed([random_image(80, 60, seed=1)])), (text[2] * 2, None),
            (prompt(text[2:], 1), processed([random_image(50, 90, seed=2)]))]
    requests = [Request(tokens=t, prompt_len=len(t), pixel_values=pv) for t, pv in rows]
    return model, kv, driver, requests


def generate(name, device, *, feedback, enable_trace=True):
    """Sampled tokens of three requests (the third joining after ``JOIN_AFTER`` steps, each leaving after its
    ``NEW_TOKENS``, the batch condensed after a leave), the host's rows reloaded at every step unless ``feedback``;
    and the generator."""
    model, _, driver, requests = (build_gemma3 if name == "gemma3" else build)(name, device, enable_trace)
    model.warmup_model_decode(kv_cache=driver.kv_cache, enable_trace=enable_trace, max_batch_size=MAX_BATCH,
                              num_blocks=driver.width, can_sample_on_device=True)

    def generated(r):
        return len(r.tokens) - r.prompt_len

    def join(group, slots):
        for r, slot in zip(group, slots):
            driver.add(r, slot=slot)
        for r, logits in zip(group, driver.prefill(group)):
            r.tokens.append(int(logits.argmax()))

    join(requests[:2], (1, 3))
    active, changed = requests[:2], True
    while True:
        for r in [r for r in active if generated(r) == NEW_TOKENS[requests.index(r)]]:
            driver.remove(r)
            active.remove(r)
            changed = True
            last = max(active, key=lambda a: a.slot, default=None)
            if last is not None and last.slot > r.slot:
                driver.move(last, r.slot)
        if generated(requests[0]) == JOIN_AFTER and not requests[2].computed:
            join(requests[2:], (0,))
            active.append(requests[2])
            changed = True
        if not active:
            return [r.tokens[r.prompt_len:] for r in requests], model
        tokens = driver.decode(SEEDED, reset_batch=changed or not feedback)
        changed = False
        for r in active:
            r.tokens.append(int(tokens[r.slot]))


@pytest.mark.parametrize("name, enable_trace", [
    ("mistral-window", True), ("llama-gqa", False), ("whisper-multilingual", True), ("bart", True), ("mbart", True),
    ("mllama", True), ("qwen2.5-vl", True), ("gemma3", True)])
def test_tokens_fed_back_on_the_device_equal_synchronous_ones(host_device, name, enable_trace):
    expected, sync = generate(name, host_device, feedback=False, enable_trace=enable_trace)
    got, fed = generate(name, host_device, feedback=True, enable_trace=enable_trace)
    assert got == expected
    # Steady steps only: not the first after a prefill, a join, a leave or a move.
    assert sync.feedback.steps == 0 and fed.feedback.steps == 3
    assert [len(t) for t in got] == list(NEW_TOKENS)
    assert any(a != b for t in got for a, b in zip(t, t[1:])), "a run of one repeated token proves nothing"
    if enable_trace:  # a fed-back step finds its positions (advanced by the step before) on the device already
        assert {n: fed.traces.skipped[n] for n in STEADY[name]} == dict.fromkeys(STEADY[name], fed.feedback.steps)
        # and its rows' sampling parameters, which change only with the batch (when positions are copied too)
        for n in ("k", "p", "temp"):
            assert fed.traces.skipped[n] >= fed.feedback.steps, (n, dict(fed.traces.skipped))
            assert fed.traces.copies[n] <= fed.traces.copies["current_pos"], (n, dict(fed.traces.copies))


def rotary_config(name):
    """The HF text config one family's rotary setup reads (Gemma 3: one per layer type) and its head dim."""
    if name == "llama-gqa":
        config = tiny_model(name).config
    elif name == "mllama":
        config = tiny_mllama().config.text_config
    else:
        config = rope_config(tiny_gemma3().config.text_config, name.removeprefix("gemma3-"))
    return config, DecoderArgs.from_hf(config, max_batch_size=MAX_BATCH, max_seq_len=MAX_LEN).head_dim


@pytest.mark.parametrize("name", ["llama-gqa", "mllama", "gemma3-sliding_attention", "gemma3-full_attention"])
def test_rotary_rows_looked_up_on_the_device_equal_the_hosts(host_device, name):
    """Decode looks its cos/sin rows up on the device from each user's rotary index (so that the step can advance it
    itself): the rows the rotary op reads (each user's first) equal the host-built ones, bit for bit, whatever the
    scaling (Llama 3's, Gemma 3's linear one); padding rows (position -1) read position 0's."""
    config, head_dim = rotary_config(name)
    with use(host_device):
        rope = RotarySetup(config, head_dim, host_device, decode_rows=32)
        table = RotaryTable(rope, max_seq_len=MAX_LEN)
        positions = torch.cat([torch.randint(0, MAX_LEN, (24,), generator=torch.Generator().manual_seed(0)),
                               torch.full((8,), -1)])
        host = to_device(rope.decode_inputs(positions), host_device)
        index = to_device({"rot_idx": rotary_index(positions, positions, host_device)}, host_device)["rot_idx"]
        for expected, got in zip((host["cos"], host["sin"]), table.decode_rows(index)):
            assert got.memory_config() == expected.memory_config()
            assert torch.equal(ttnn.to_torch(got)[:, :, :1], ttnn.to_torch(expected)[:, :, :1])
