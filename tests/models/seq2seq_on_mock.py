"""Run an encoder-decoder generator's encoder, prefill and decode paths on the mock device (real ttnn validation).

``python -m tests.models.seq2seq_on_mock BOARD NAME:TT_DATA_PARALLEL:OPTIMIZATIONS...`` (one board per process, see
:mod:`tests.models.board_runs`). Prints one ``ok`` line per case with its output shapes.
"""

import torch

from tests.models import board_runs
from tt_models.testing.seq2seq import ALL_CASES, encoder_input, tiny_seq2seq

MAX_BATCH, BLOCK = 4, 32


def run(device, name: str, data_parallel: int, optimizations: str) -> list[tuple[int, ...]]:
    """Warm up, encode, prefill two rows (one from a cached prefix) and decode a padded batch (traced, which the
    generator runs eagerly on the mock device); the output shapes."""
    hf = tiny_seq2seq(name)
    model = ALL_CASES[name][2].from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                               tt_data_parallel=data_parallel, optimizations=optimizations)
    replica = model.models[0]
    kv = model.allocate_kv_cache((24, replica.kv_geometry[0], BLOCK, replica.args.head_dim),
                                 torch.bfloat16, replica.n_layers)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=True, max_batch_size=MAX_BATCH, num_blocks=4)
    ours, _, encoder_len = encoder_input(hf, 50, seed=0)
    encoded = model.encode_forward([ours])[0]
    logits = model.prefill_forward(
        tokens=torch.randint(0, 300, (2, 40)), page_table=torch.tensor([[5, 9, 0, 0], [1, 2, 0, 0]], dtype=torch.int32),
        kv_cache=kv, prompt_lens=[8, 40], start_pos=[0, 32], encoder_inputs=[ours, None],
        cross_page_table=torch.tensor([[7, 3, 11, 0], [12, 13, 0, 0]], dtype=torch.int32),
        encoder_lens=[encoder_len, encoder_len], empty_slots=[0, MAX_BATCH - 1])
    decoded = model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32), start_pos=torch.tensor([8, -1, -1, 40], dtype=torch.int32),
        page_table=torch.tensor([[5, 9, 0, 0], [0] * 4, [0] * 4, [1, 2, 0, 0]], dtype=torch.int32), kv_cache=kv,
        cross_page_table=torch.tensor([[7, 3, 11, 0], [0] * 4, [0] * 4, [12, 13, 0, 0]], dtype=torch.int32),
        encoder_lens=torch.tensor([encoder_len, 0, 0, encoder_len]), enable_trace=True)
    return [tuple(encoded.shape), tuple(logits.shape), tuple(decoded.shape)]


def expected(name: str) -> list[tuple[int, ...]]:
    config = ALL_CASES[name][0]()
    encoder_len = config.max_source_positions if config.model_type == "whisper" else 50
    return [(encoder_len, config.d_model), (2, 1, config.vocab_size), (MAX_BATCH, 1, config.vocab_size)]


if __name__ == "__main__":
    board_runs.main(run)
