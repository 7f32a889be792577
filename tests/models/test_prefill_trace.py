"""Traced prefill (host backend) of the Llama family: warm-up with ``enable_trace`` captures the prefill lengths of
``prefill_trace_lengths`` (128 and 256 here, where ``max_prefill_trace_len`` is set: the host's default is none), and
a prefill row from position 0 whose tile-padded length is one of them replays that trace; any other row runs eagerly.

Two generators with the same weights and their own KV caches, one prefilling eagerly, the other with
``enable_trace``, get the same batches: rows of every kind (an exact captured length, one padded up to it, an
uncaptured length, a resumed chunk) on scattered blocks whose page-table rows change between the batches. A replay
that read stale tokens or page tables would give other logits or leave other cache blocks.
"""

from types import SimpleNamespace

import pytest
import torch

from tt_models.models.llama.generator import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
from tt_models.runtime import close_device, open_device
from tt_models.testing.llama import tiny_model

BLOCK, NUM_BLOCKS, MAX_LEN, BATCH = 32, 40, 256, 4
FAMILIES = {"llama-gqa": LlamaForCausalLM, "qwen2-bias": Qwen2ForCausalLM, "mistral-window": MistralForCausalLM,
            "qwen2-bias-tp": Qwen2ForCausalLM}


def build(name, device):
    hf = tiny_model(name)
    model = FAMILIES[name].from_state_dict(hf.config, hf.state_dict(), device, BATCH, max_seq_len=MAX_LEN)
    model.max_prefill_trace_len = MAX_LEN  # (the host backend captures none by default)
    n_kv_heads, head_dim = model.models[0].kv_geometry
    kv = model.allocate_kv_cache((NUM_BLOCKS, n_kv_heads, BLOCK, head_dim), torch.bfloat16, model.models[0].n_layers)
    return model, kv


def batch(lens, starts, seed):
    """Tokens (with stale tails), prompt lengths, start positions and a page table of scattered, disjoint blocks
    (block 0 left out: a stale replay of an all ``-1`` warm-up table would miss every block)."""
    g = torch.Generator().manual_seed(seed)
    width = MAX_LEN // BLOCK
    tokens = torch.randint(3, 300, (len(lens), MAX_LEN), generator=g)
    blocks = (torch.randperm(NUM_BLOCKS - 1, generator=g) + 1)[: len(lens) * width].reshape(len(lens), width)
    return dict(tokens=tokens, prompt_lens=torch.tensor(lens), start_pos=torch.tensor(starts),
                page_table=blocks.to(torch.int32), empty_slots=list(range(len(lens))))


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-bias", "mistral-window"])
def test_traced_prefill_is_bit_identical_to_eager(host_device, name):
    eager, eager_kv = build(name, host_device)
    traced, traced_kv = build(name, host_device)
    assert traced.prefill_trace_lengths(MAX_LEN) == [128, 256]
    traced.warmup_model_prefill(kv_cache=traced_kv, enable_trace=False)
    traced.warmup_model_prefill(kv_cache=traced_kv, enable_trace=True)
    assert len(traced.prefill_traces.captures) == 2
    # Rows: exactly 128, 250 (padded to 256), 60 (padded to 64: not captured), 256; then 100 (padded to 128), 128,
    # 200 (not captured) and 128 from position 96 (a resumed chunk: eager, reading the cache its first batch wrote).
    first = batch([128, 250, 60, 256], [0] * 4, seed=1)
    second = batch([100, 128, 200, 128], [0, 0, 0, 96], seed=2)
    second["page_table"][3], second["tokens"][3] = first["page_table"][0], first["tokens"][0]
    for step, (args, replays) in enumerate(((first, 3), (second, 2))):
        executions = traced.prefill_traces.executions
        want = eager.prefill_forward(**args, kv_cache=eager_kv)
        got = traced.prefill_forward(**args, kv_cache=traced_kv, enable_trace=True)
        assert traced.prefill_traces.executions - executions == replays
        assert torch.equal(got, want), f"batch {step}"
    used = torch.cat([first["page_table"].flatten(), second["page_table"].flatten()]).unique().tolist()
    for got, want in zip(traced.read_kv_blocks(traced_kv, used), eager.read_kv_blocks(eager_kv, used)):
        assert torch.equal(got, want)


def test_traced_prefill_with_device_sampling(host_device):
    """Warm-up with ``can_sample_on_device`` captures the device-logits prefill; greedy tokens sampled on the device
    from replays equal those of eager prefill."""
    eager, eager_kv = build("llama-gqa", host_device)
    traced, traced_kv = build("llama-gqa", host_device)
    traced.warmup_model_prefill(kv_cache=traced_kv, enable_trace=True, can_sample_on_device=True)
    greedy = SimpleNamespace(temperature=[0.0] * 3, top_k=[1] * 3, top_p=[0.0] * 3)
    args = batch([128, 97, 33], [0] * 3, seed=3)
    want = eager.prefill_forward(**args, kv_cache=eager_kv, sampling_params=greedy)
    got = traced.prefill_forward(**args, kv_cache=traced_kv, sampling_params=greedy, enable_trace=True)
    assert traced.prefill_traces.executions == 2 + 2  # the warm-up's own replays, then rows 128 and 97
    assert torch.equal(got, want)


def test_traced_prefill_on_a_tensor_parallel_mesh():
    """On a 1x2 host mesh (vocabulary-split LM head, logits gathered inside the trace for device sampling) two
    batches on other page tables: replayed tokens and cache blocks equal eager prefill's."""
    mesh = open_device("host", mesh_shape=(1, 2))
    try:
        eager, eager_kv = build("qwen2-bias-tp", mesh)
        traced, traced_kv = build("qwen2-bias-tp", mesh)
        traced.warmup_model_prefill(kv_cache=traced_kv, enable_trace=True, can_sample_on_device=True)
        greedy = SimpleNamespace(temperature=[0.0] * 3, top_k=[1] * 3, top_p=[0.0] * 3)
        used = []
        for seed in (4, 5):
            args = batch([128, 100, 60], [0] * 3, seed=seed)
            used += args["page_table"].flatten().tolist()
            want = eager.prefill_forward(**args, kv_cache=eager_kv, sampling_params=greedy)
            assert torch.equal(traced.prefill_forward(**args, kv_cache=traced_kv, sampling_params=greedy,
                                                      enable_trace=True), want)
        assert traced.prefill_traces.executions == 2 + 2 * 2
        used = sorted(set(used))
        assert torch.equal(traced.read_kv_blocks(traced_kv, used)[0], eager.read_kv_blocks(eager_kv, used)[0])
    finally:
        close_device(mesh)


def test_default_capture_lengths(host_device):
    """By default the host backend captures no prefill (warm-up stays one block's compile); a TT device's default
    is tt_transformers' 128, 256, 512, never past ``max_seq_len``."""
    model, kv = build("llama-gqa", host_device)
    model.max_prefill_trace_len = None
    assert model.prefill_trace_lengths(8192) == []
    model.warmup_model_prefill(kv_cache=kv, enable_trace=True)
    assert not model.prefill_traces.captures
    model.replica_backend = lambda device: "ttnn"
    assert model.prefill_trace_lengths(8192) == [128, 256, 512]
    assert model.prefill_trace_lengths(300) == [128, 256]
