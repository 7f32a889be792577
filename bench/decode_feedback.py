"""Host time between two decode enqueues, per family, with device-side token feedback on and off (host backend).

A traced decode step sampled greedily on the device, ``BATCH`` users at position ``POSITION``. Off (TT vLLM's
synchronous decode, or its async decode with ``reset_batch=True``): before it can enqueue step N+1 the host reads
step N's tokens back and builds step N+1's inputs from them, so the two enqueues are at least that far apart (on a
device, plus the wait for step N itself, which no host backend can show). On (``reset_batch=False``): the host builds
step N+1's inputs from its position mirror, copies all but the tokens, and enqueues the on-device copy of step N's
sampled tokens into the trace's token input; the read of step N overlaps step N+1 on the device.

The trace's replay is stubbed during the timed calls (``execute_trace`` only enqueues on a device: its compute is the
device's, which the host backend would run here in Python), so the times are the host's part only. The families are
the tests' tiny random models (tt_models/testing/*.py): the host inputs depend on the batch, the family's inputs
and the head dim, not on the model's width.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Iterator

import torch

from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
from tt_models.runtime import api_for
from tt_models.testing.gemma3 import tiny_gemma3
from tt_models.testing.llama import tiny_model
from tt_models.testing.mllama import tiny_mllama
from tt_models.testing.qwen2_5_vl import tiny_qwen2_5_vl
from tt_models.testing.seq2seq import CASES as SEQ2SEQ, tiny_seq2seq

BATCH, BLOCK, WIDTH, POSITION = 32, 32, 2, 40


def _seq2seq(name: str) -> Callable[[Any], tuple[Any, dict]]:
    def build(device: Any) -> tuple[Any, dict]:
        hf = tiny_seq2seq(name)
        model = SEQ2SEQ[name][2].from_state_dict(hf.config, hf.state_dict(), device, BATCH)
        cross = -(-model.max_cross_attn_tokens // BLOCK)
        return model, dict(cross_page_table=torch.zeros(BATCH, cross, dtype=torch.int32),
                           encoder_lens=torch.full((BATCH,), model.max_cross_attn_tokens, dtype=torch.int32))
    return build


def _mllama(device: Any) -> tuple[Any, dict]:
    hf = tiny_mllama()
    model = MllamaForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, BATCH,
                                                           max_seq_len=WIDTH * BLOCK)
    cross = -(-model.max_cross_attn_tokens // BLOCK)
    return model, dict(cross_page_table=torch.zeros(BATCH, cross, dtype=torch.int32))


def _decoder(cls: type, make: Callable[[], Any]) -> Callable[[Any], tuple[Any, dict]]:
    def build(device: Any) -> tuple[Any, dict]:
        hf = make()
        return cls.from_state_dict(hf.config, hf.state_dict(), device, BATCH, max_seq_len=WIDTH * BLOCK), {}
    return build


FAMILIES = {
    "Llama (GQA)": _decoder(LlamaForCausalLM, lambda: tiny_model("llama-gqa")),
    "Whisper": _seq2seq("whisper-multilingual"),
    "BART": _seq2seq("bart"),
    "MBart": _seq2seq("mbart"),
    "Mllama": _mllama,
    "Qwen2.5-VL (M-RoPE)": _decoder(Qwen2_5_VLForConditionalGeneration, tiny_qwen2_5_vl),
    "Gemma 3": _decoder(Gemma3ForConditionalGeneration, tiny_gemma3),
}


@contextmanager
def enqueue_only(api: ModuleType) -> Iterator[None]:
    """``execute_trace`` enqueues and returns, as on a device (the replay's compute is the device's)."""
    replay = api.execute_trace
    api.execute_trace = lambda *args, **kwargs: None
    try:
        yield
    finally:
        api.execute_trace = replay


def timed(fn: Callable[[], Any], steps: int) -> float:
    """Median milliseconds of ``fn`` over ``steps`` calls (after one call that may compile or capture)."""
    fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def between_enqueues(device: Any, steps: int) -> dict[str, tuple[float, float]]:
    """Per family: (feedback off, feedback on) median host milliseconds between two decode enqueues."""
    greedy = SimpleNamespace(temperature=[0.0] * BATCH, top_k=[1] * BATCH, top_p=[0.0] * BATCH)
    out = {}
    for name, build in FAMILIES.items():
        model, extra = build(device)
        n_kv_heads, head_dim = model.models[0].kv_geometry
        kv = model.allocate_kv_cache((BATCH * WIDTH * 2, n_kv_heads, BLOCK, head_dim), torch.bfloat16,
                                     model.models[0].n_layers)
        step = dict(tokens=torch.ones(BATCH, 1, dtype=torch.int32), start_pos=torch.full((BATCH,), POSITION),
                    page_table=torch.arange(BATCH * WIDTH, dtype=torch.int32).reshape(BATCH, WIDTH), kv_cache=kv,
                    enable_trace=True, read_from_device=False, sampling_params=greedy, **extra)
        raw = model.decode_forward(**step)  # captures the trace (and runs it: tokens to feed back)

        def off() -> None:
            tokens = model.process_decode_output_host(raw, is_tokens=True)  # step N's tokens, before step N+1
            model.decode_forward(**(step | dict(tokens=tokens.reshape(-1, 1), reset_batch=True)))

        def on() -> None:
            model.decode_forward(**step, reset_batch=False)

        with enqueue_only(api_for(device)):
            out[name] = (timed(off, steps), timed(on, steps))
        assert model.feedback.steps >= steps
        model.release_traces()
    return out


def report(device: Any, steps: int) -> None:
    print(f"\nHost ms between two traced decode enqueues (greedy on device, batch {BATCH}; replay stubbed: host part "
          "only):")
    print(f"  {'family':22s} {'feedback off':>12s} {'feedback on':>12s}")
    for name, (off, on) in between_enqueues(device, steps).items():
        print(f"  {name:22s} {off:12.2f} {on:12.2f}")
    print("  (off: plus, on a device, the wait for step N to finish before its tokens can be read; on: step N+1 is "
          "enqueued behind step N, and the read of step N overlaps it)")
