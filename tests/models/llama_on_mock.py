"""Run a Llama-family (or text-only Gemma 3) generator's prefill and decode paths on the mock device (real ttnn
validation): the checkpoint's architecture picks the class.

``python -m tests.models.llama_on_mock BOARD CHECKPOINT_DIR:TT_DATA_PARALLEL:OPTIMIZATIONS...`` (one board per
process, see :mod:`tests.models.board_runs`). Prints one ``ok`` line per case with its output shapes.
"""

from types import SimpleNamespace

import numpy as np
import torch
from transformers import AutoConfig

from tests.models import board_runs
from tt_models.engine.model_runner import generator_class

MAX_BATCH, BLOCK, NUM_BLOCKS, WIDTH = 4, 32, 16, 4


def run(device, checkpoint: str, data_parallel: int, optimizations: str) -> list[tuple[int, ...]]:
    """Warm up, prefill two rows (one from a cached prefix) and decode a padded batch; the output shapes."""
    config = AutoConfig.from_pretrained(checkpoint)
    model = generator_class(config).initialize_vllm_model(config, device, MAX_BATCH, max_seq_len=WIDTH * BLOCK,
                                                          tt_data_parallel=data_parallel, optimizations=optimizations)
    args = model.models[0].args
    kv = model.allocate_kv_cache((NUM_BLOCKS, model.models[0].kv_geometry[0], BLOCK, args.head_dim), torch.bfloat16,
                                 args.n_layers)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=False, max_batch_size=MAX_BATCH, num_blocks=WIDTH,
                              can_sample_on_device=False)
    prefill = model.prefill_forward(tokens=torch.randint(0, 100, (2, 45), dtype=torch.int32),
                                    page_table=torch.tensor([[3, 1, 9, 9], [4, 5, 6, 2]], dtype=torch.int32),
                                    kv_cache=kv, prompt_lens=np.array([40, 45]), start_pos=np.array([0, 32]),
                                    empty_slots=[0, MAX_BATCH - 1])
    raw = model.decode_forward(tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32),
                               start_pos=torch.tensor([40, -1, -1, 45], dtype=torch.int32),
                               page_table=torch.tensor([[3, 1, 0, 0], [0] * 4, [0] * 4, [4, 5, 6, 0]],
                                                       dtype=torch.int32),
                               kv_cache=kv, enable_trace=False, read_from_device=False)
    host, events = model.read_decode_output(raw, async_read=True)
    assert events == []
    shapes = [tuple(prefill.shape), tuple(model.process_decode_output_host(raw).shape), tuple(host.shape)]
    # Device sampling (asked for traced: the generator runs it eagerly, trace capture crashes on the mock device):
    # a mixed greedy / top-k / top-p batch with penalties and log-probs in decode, greedy rows in prefill.
    sampling = SimpleNamespace(temperature=[0.0, 0.0, 0.0, 0.8], top_k=[1, 1, 1, 20], top_p=[0.0, 0.0, 0.0, 0.9],
                               presence_penalty=[0.0] * 3 + [0.5], frequency_penalty=[0.0] * 4,
                               repetition_penalty=[1.2] + [1.0] * 3, seed=[None, None, None, 3],
                               enable_log_probs=[True] + [False] * 3)
    history = torch.full((MAX_BATCH, 8), -1, dtype=torch.int32)
    history[0, :3] = torch.tensor([5, 6, 7])
    tokens, log_probs = model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32), start_pos=torch.tensor([41, -1, -1, 46]),
        page_table=torch.tensor([[3, 1, 0, 0], [0] * 4, [0] * 4, [4, 5, 6, 0]], dtype=torch.int32), kv_cache=kv,
        sampling_params=sampling, prompt_tokens=history, output_tokens=history, enable_trace=True)
    # TT vLLM's steady async decode: the host's rows a step behind, the sampled tokens fed back on the device.
    model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32), start_pos=torch.tensor([41, -1, -1, 46]),
        page_table=torch.tensor([[3, 1, 0, 0], [0] * 4, [0] * 4, [4, 5, 6, 0]], dtype=torch.int32), kv_cache=kv,
        sampling_params=sampling, prompt_tokens=history, output_tokens=history, enable_trace=True, reset_batch=False)
    assert model.feedback.steps == 1 and model.feedback.positions.tolist() == [42, -1, -1, 47]
    first = model.prefill_forward(tokens=torch.randint(0, 100, (1, 20), dtype=torch.int32),
                                  page_table=torch.tensor([[7, 8, 0, 0]], dtype=torch.int32), kv_cache=kv,
                                  prompt_lens=np.array([20]), empty_slots=[1],
                                  sampling_params=SimpleNamespace(temperature=[0.0], top_k=[1], top_p=[0.0]))
    return shapes + [tuple(tokens.shape), tuple(log_probs.shape), tuple(first.shape)]


if __name__ == "__main__":
    board_runs.main(run)
