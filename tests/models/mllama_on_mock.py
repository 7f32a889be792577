"""Run Llama 3.2 Vision's vision encoder, prefill and decode on the mock device (real ttnn validation).

``python -m tests.models.mllama_on_mock BOARD CONFIG:TT_DATA_PARALLEL:OPTIMIZATIONS...`` (CONFIG: a name of
:data:`~tt_models.testing.mllama.CONFIGS`; one board per process, see :mod:`tests.models.board_runs`). Prints one
``ok`` line per case with its output shapes.
"""

import torch

from tests.models import board_runs
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.testing.images import random_image
from tt_models.testing.mllama import IMAGE_TOKEN, tiny_mllama

MAX_BATCH, BLOCK, NUM_BLOCKS, WIDTH = 4, 32, 24, 2


def run(device, config: str, data_parallel: int, profile: str) -> list[tuple[int, ...]]:
    hf = tiny_mllama(name=config)
    model = MllamaForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), device, MAX_BATCH,
                                                           max_seq_len=WIDTH * BLOCK, tt_data_parallel=data_parallel,
                                                           optimizations=profile)
    args = model.models[0].text.args
    kv = model.allocate_kv_cache((NUM_BLOCKS, model.models[0].kv_geometry[0], BLOCK, args.head_dim), torch.bfloat16,
                                 args.n_layers)
    cross_blocks = -(-model.max_cross_attn_tokens // BLOCK)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=False, max_batch_size=MAX_BATCH, num_blocks=WIDTH)
    tokens = torch.randint(3, 300, (2, 40))
    tokens[0, 2] = IMAGE_TOKEN
    cross = torch.tensor([[7, 3, 11, 0], [0, 0, 0, 0]], dtype=torch.int32)[:, : cross_blocks + 1]
    logits, masks, text_rows = model.prefill_forward(
        tokens=tokens, images=[[random_image(120, 50, seed=0)], None], page_table=torch.tensor([[5, 9], [1, 2]]),
        kv_cache=kv, prompt_lens=[40, 33], cross_page_table=cross, empty_slots=[0, MAX_BATCH - 1])
    decoded = model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32), start_pos=torch.tensor([40, -1, -1, 33]),
        page_table=torch.tensor([[5, 9], [0, 0], [0, 0], [1, 2]], dtype=torch.int32), kv_cache=kv,
        cross_page_table=torch.cat([cross[:1], torch.zeros(3, cross.shape[1], dtype=torch.int32)]),
        cross_attention_masks=[masks[0], None, None, masks[1]],
        full_text_row_masked_out_mask=[text_rows[0], None, None, text_rows[1]],
        enable_trace=True)  # runs eagerly on the mock device: its trace capture crashes
    return [tuple(logits.shape), tuple(decoded.shape)]


if __name__ == "__main__":
    board_runs.main(run)
